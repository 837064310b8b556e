"""Sample from a trained GPT: python generate.py CKPT --prompt "ROMEO:" --max-new-tokens 300"""

from zoo.entry.errors import one_line_errors
from zoo.entry.generate import generate, parse_args


@one_line_errors
def main(argv=None) -> None:
    for i, text in enumerate(generate(parse_args(argv))):
        print(f"----- sample {i} -----\n{text}")


if __name__ == "__main__":
    main()
