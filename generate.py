"""Sample from a trained GPT: python generate.py CKPT --prompt "ROMEO:" --max-new-tokens 300
Translate with a trained Transformer: python generate.py CKPT --source "Ein Hund rennt." [--beam-size 5]
                                  or: python generate.py CKPT --input sentences.de.txt > sentences.en.txt
(the same as `zoo-generate`)."""

from zoo.entry.cli import generate

if __name__ == "__main__":
    generate()
