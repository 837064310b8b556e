"""Sample from a trained GPT: python generate.py CKPT --prompt "ROMEO:" --max-new-tokens 300
Translate with a trained Transformer: python generate.py CKPT --source "Ein Hund rennt." [--beam-size 5]
                                  or: python generate.py CKPT --input sentences.de.txt > sentences.en.txt"""

from zoo.entry.errors import one_line_errors
from zoo.entry.generate import parse_args, run


@one_line_errors
def main(argv=None) -> None:
    for text in run(parse_args(argv)):
        print(text)


if __name__ == "__main__":
    main()
