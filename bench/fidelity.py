#!/usr/bin/env python3
"""How faithful copies of a model are to it: the reference model answers each prompt greedily,
then every model (the reference too) reads those answers, and we count how often its likeliest
next token is the answer's (top-1 agreement) and its perplexity on them.

Each model is served in turn by `medusa serve` and read through the OpenAI-compatible API
(`/v1/completions` with `echo` and `logprobs`, the way evaluation harnesses score a text).

    bench/fidelity.py --prompts bench/heldout/ordinary.txt REFERENCE.gguf COPY.gguf ...
"""

import argparse
import json
import math
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


# The chat template of the default model (ChatML, as its GGUF carries it) around one user
# message: the text a chat request's answer follows. The API does not expose the template.
CHATML = "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def call(base, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data, {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.load(answer)


class Served:
    """`medusa serve` on one model, on a free port, for the length of a `with` block."""

    def __init__(self, medusa, model, port):
        self.base = f"http://127.0.0.1:{port}"
        self.db = tempfile.NamedTemporaryFile(suffix=".sqlite")
        self.process = subprocess.Popen(
            [medusa, "serve", "--no-heads", "--no-ui", "--model", model, "--port", str(port),
             "--db", self.db.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def __enter__(self):
        for _ in range(240):
            if self.process.poll() is not None:
                sys.exit(f"medusa serve exited with {self.process.returncode}")
            try:
                self.model = call(self.base, "/v1/models")["data"][0]["id"]
                return self
            except OSError:
                time.sleep(0.5)
        sys.exit("medusa serve did not answer")

    def __exit__(self, *_):
        self.process.send_signal(signal.SIGINT)
        self.process.wait()
        self.db.close()

    def answer(self, prompt, max_tokens):
        reply = call(self.base, "/v1/chat/completions",
                     {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                      "max_tokens": max_tokens, "temperature": 0})
        return reply["choices"][0]["message"]["content"]

    def scored(self, text):
        """Each token of `text`: its log-probability and the likeliest token in its place."""
        lists = call(self.base, "/v1/completions",
                     {"model": self.model, "prompt": text, "max_tokens": 0, "echo": True,
                      "logprobs": 1})["choices"][0]["logprobs"]
        return [(token, logprob, max(top, key=top.get) if top else None)
                for token, logprob, top in zip(lists["tokens"], lists["token_logprobs"],
                                               lists["top_logprobs"])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", required=True, help="one prompt per line")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--medusa", default="target/release/medusa")
    parser.add_argument("--port", type=int, default=18470)
    parser.add_argument("--template", default=CHATML,
                        help="a user message in the models' chat template, with {prompt}")
    parser.add_argument("reference")
    parser.add_argument("copies", nargs="*")
    args = parser.parse_args()
    prompts = [line.strip() for line in Path(args.prompts).read_text().splitlines() if line.strip()]

    with Served(args.medusa, args.reference, args.port) as served:
        answers = [served.answer(p, args.max_tokens) for p in prompts]
    for model in [args.reference, *args.copies]:
        with Served(args.medusa, model, args.port) as served:
            nll, agreed, counted = 0.0, 0, 0
            for prompt, answer in zip(prompts, answers):
                head = args.template.format(prompt=prompt)
                start = len(served.scored(head))
                for token, logprob, likeliest in served.scored(head + answer)[start:]:
                    nll -= logprob
                    agreed += likeliest == token
                    counted += 1
        print(f"{Path(model).name}: {counted} answer tokens, top-1 agreement "
              f"{100 * agreed / counted:.1f}%, perplexity {math.exp(nll / counted):.3f}",
              flush=True)


if __name__ == "__main__":
    main()
