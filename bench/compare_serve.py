#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""multihead serve against the library it serves: per input, is the server as fast?

The spam classifier and the cmudict encoder-decoder (greedy), fp32, --threads each: the library
call (multihead.load_run) and `multihead serve` with one HTTP client over a keep-alive connection,
in alternating rounds: one short word, one e-mail of about 100 characters, then the test e-mails
and 1,024 test words in requests of 32 sorted by length.

    multihead train --preset spam && multihead train --preset cmudict
    /usr/bin/python3 bench/compare_serve.py --threads 2 --rounds 3
"""
import os

from compare_inference import arguments, served, timed, use_this_build


def main():
    use_this_build()
    import multihead
    a = arguments(__doc__.splitlines()[0]).parse_args()
    cls = multihead.load_run(a.classifier, threads=a.threads, precision="fp32")
    s2s = multihead.load_run(a.s2s, threads=a.threads, precision="fp32")
    texts = sorted((t for t in (" ".join(t.split()) for t in cls.test_texts()[0]) if t), key=len)
    words = sorted(s2s.test_texts()[0][:1024], key=len)
    text = min(texts, key=lambda t: abs(len(t) - 100))
    word = min(words, key=lambda w: abs(len(w) - 6))
    spec = {"bin": os.path.abspath(a.bin), "threads": a.threads}

    def cells(classify, pronounce):
        return {"one word (ms)": timed(lambda: pronounce([word]), 20, 1.0) * 1e3,
                "one e-mail (ms)": timed(lambda: classify([text]), 20, 1.0) * 1e3,
                "e-mails/s": len(texts) / timed(lambda: [classify(texts[i:i + 32]) for i in range(0, len(texts), 32)], 3),
                "words/s": len(words) / timed(lambda: [pronounce(words[i:i + 32]) for i in range(0, len(words), 32)], 3)}

    print(f"{a.threads} threads; '{word}', an e-mail of {len(text)} characters; {len(texts)} e-mails, {len(words)} words")
    for r in range(a.rounds):
        library = cells(cls.predict, lambda w: s2s.pronounce(w, beam=1))
        # Large requests of long e-mails: the body cap raised with the input cap.
        cls_p, c = served(spec, a.classifier, "fp32", "--max-body-bytes", str(2**26))
        s2s_p, s = served(spec, a.s2s, "fp32", "--beam", "1")
        try:
            server = cells(c, s)
        finally:
            for p in (cls_p, s2s_p):
                p.terminate()
                p.wait()
        print(f"round {r + 1}: " + "; ".join(f"{k} library {library[k]:.1f}, serve {server[k]:.1f}" for k in library),
              flush=True)


if __name__ == "__main__":
    main()
