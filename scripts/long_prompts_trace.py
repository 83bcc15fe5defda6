#!/usr/bin/env python3
"""Writes a trace (docs/trace-format.md) of N chat requests of distinct random text, each exactly
TOKENS prompt tokens as the engine emulator counts them (its /tokenize), no arrival times: the
case of issue 17's stall (30 requests of 51,100 tokens), re-checked in docs/proof.md.

Usage: python3 scripts/long_prompts_trace.py OUT.jsonl [--requests 30] [--tokens 51100]
           [--tokenize-url http://127.0.0.1:18999/tokenize] [--seed 5]
Start an emulator first: prefix-router engine --listen 127.0.0.1:18999 --profile tiny-test
"""
import argparse
import json
import random
import urllib.request


def count(url, content):
    body = json.dumps({"model": "llama", "messages": [{"role": "user", "content": content}]})
    req = urllib.request.Request(url, data=body.encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)["count"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--requests", type=int, default=30)
    p.add_argument("--tokens", type=int, default=51100)
    p.add_argument("--tokenize-url", default="http://127.0.0.1:18999/tokenize")
    p.add_argument("--seed", type=int, default=5)
    a = p.parse_args()
    rng = random.Random(a.seed)
    with open(a.out, "w") as f:
        for _ in range(a.requests):
            words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7)))
                     for _ in range(a.tokens)]
            lo, hi = 1, len(words)  # the most words whose text is at most a.tokens tokens
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if count(a.tokenize_url, " ".join(words[:mid])) <= a.tokens:
                    lo = mid
                else:
                    hi = mid - 1
            content = " ".join(words[:lo])
            f.write(json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": 128}) + "\n")


if __name__ == "__main__":
    main()
