"""Send text (generated samples, translations) to whichever loggers the trainer has."""

from __future__ import annotations

from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger, WandbLogger


def log_text(loggers: list[Logger], key: str, texts: list[str], step: int) -> None:
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            for i, text in enumerate(texts):
                # TensorBoard renders markdown; a code block keeps line breaks and spacing.
                logger.experiment.add_text(f"{key}/{i}", "```\n" + text + "\n```", global_step=step)
        elif isinstance(logger, WandbLogger):
            logger.log_text(key=key, columns=["step", "text"], data=[[step, t] for t in texts])
        elif isinstance(logger, CSVLogger):
            path = f"{logger.log_dir}/{key.replace('/', '_')}.txt"
            with open(path, "a", encoding="utf-8") as f:
                for text in texts:
                    f.write(f"===== step {step} =====\n{text}\n")
