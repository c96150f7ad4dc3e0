"""Hugging Face checkpoints and tokenizers read by multihead, against the reference libraries:
`tokenizers` for token ids, `transformers` for logits and hidden states, `sentence-transformers` for
embeddings. Every checkpoint here is made offline: random tiny models of each architecture, and
tokenizers trained on a small corpus; the real all-MiniLM-L6-v2 where scripts/setup.sh --data has
unpacked it."""

import json
import os
import random
import subprocess

import pytest

import multihead

tokenizers = pytest.importorskip("tokenizers", reason="the reference tokenizers are in the project's .venv")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("MULTIHEAD_CLI", os.path.join(ROOT, "build", "multihead"))
MINILM = os.path.join(ROOT, "data", "all-MiniLM-L6-v2")

WORDS = ("The quick brown fox jumps over the lazy dog . Don't stop : it's 3.14 % of $ 20 , isn't it ? "
         "Ünïcödé naïve café résumé Straße İstanbul ΣΊΣΥΦΟΣ Ǆemal Ωmega 中文字符 日本語のテキスト 한국어 "
         "emoji 😀 🥰 👍🏽 e\u0301 a\u0308 x\u0378y tab\tnew\nline\r\n nul\x00 zero\u200bwidth "
         "soft\u00adhyphen nbsp\u00a0space ideographic\u3000space a\u2e43b a\u2e42b a\u1df6b a\u1df5b "
         "[CLS] [SEP] [MASK] [UNK] [PAD] [cls] unaffable antidisestablishmentarianism hello-world "
         "e-mail@example.com http://example.com/a?b=c#d ''quotes'' «guillemets» ¿qué? ¡sí! ...").split(" ")


def mixed_corpus(n, seed=0):
    """Sentences of the words above, odd code points (controls, marks, private use, unassigned,
    astral) and words longer than WordPiece's 100-character limit."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(WORDS) for _ in range(rng.randint(0, 14))]
        if rng.random() < 0.3:
            parts.append("".join(chr(rng.choice([rng.randint(0x20, 0x2FF), rng.randint(0x300, 0x36F),
                                                 rng.randint(0x2000, 0x206F), rng.randint(0xE000, 0xE010),
                                                 rng.randint(0x1F300, 0x1FAFF), rng.randint(0x0, 0x1F)]))
                                 for _ in range(rng.randint(1, 8))))
        if rng.random() < 0.05:
            parts.append("x" * rng.choice([99, 100, 101, 150]))
        out.append(rng.choice([" ", "  ", "\t", ""]).join(parts))
    return out


def wordpiece_tokenizer(tmp_path, lowercase=True, strip_accents=None):
    """A WordPiece tokenizer trained by `tokenizers` on the corpus, with BERT's normaliser,
    pre-tokeniser and post-processor, saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=strip_accents)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(mixed_corpus(400, seed=1), trainers.WordPieceTrainer(vocab_size=600,
                                                                                 special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    d = tmp_path / f"wordpiece-{lowercase}-{strip_accents}"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    return tok, d


def assert_same_ids(reference, ours, texts):
    frame = ours.frame
    for text in texts:
        want = reference.encode(text).ids
        got = frame["before"] + ours.encode(text) + frame["after"]
        assert got == want, f"{text!r}: {got} != {want}"


@pytest.mark.parametrize("lowercase,strip_accents", [(True, None), (False, None), (True, False), (False, True)])
def test_a_wordpiece_tokenizer_json_gives_the_ids_of_tokenizers(tmp_path, lowercase, strip_accents):
    reference, d = wordpiece_tokenizer(tmp_path, lowercase, strip_accents)
    ours = multihead.Tokenizer.load(d)
    assert ours.kind == "wordpiece"
    assert ours.vocab_size == reference.get_vocab_size()
    assert_same_ids(reference, ours, mixed_corpus(3000, seed=2))


def test_a_vocab_txt_gives_the_ids_of_transformers_bert_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    reference, d = wordpiece_tokenizer(tmp_path)
    vocab = sorted(reference.get_vocab().items(), key=lambda kv: kv[1])
    bert = tmp_path / "bert-vocab"
    bert.mkdir()
    (bert / "vocab.txt").write_text("".join(t + "\n" for t, _ in vocab), encoding="utf-8")
    fast = transformers.BertTokenizer(vocab=str(bert / "vocab.txt"))
    ours = multihead.Tokenizer.load(bert)
    for text in mixed_corpus(1000, seed=3):
        got = ours.frame["before"] + ours.encode(text) + ours.frame["after"]
        assert got == fast(text)["input_ids"], repr(text)


@pytest.mark.parametrize("decoder", [None, "wordpiece", "wordpiece-no-cleanup"])
def test_wordpiece_decodes_as_tokenizers_does(tmp_path, decoder):
    from tokenizers import decoders
    reference, _ = wordpiece_tokenizer(tmp_path)
    if decoder:
        reference.decoder = decoders.WordPiece(cleanup=decoder == "wordpiece")
    d = tmp_path / "with-decoder"
    d.mkdir()
    reference.save(str(d / "tokenizer.json"))
    ours = multihead.Tokenizer.load(d)
    for text in mixed_corpus(300, seed=5) + ["The quick brown fox , isn't it ?", "unaffable [MASK] fox"]:
        ids = reference.encode(text).ids
        assert ours.decode(ids) == reference.decode(ids), repr(text)


@pytest.mark.skipif(not os.path.isdir(MINILM), reason="all-MiniLM-L6-v2 is unpacked by scripts/setup.sh --data")
def test_the_real_minilm_tokenizer_gives_the_ids_of_tokenizers():
    from tokenizers import Tokenizer
    reference = Tokenizer.from_file(os.path.join(MINILM, "tokenizer.json"))
    reference.no_truncation()
    reference.no_padding()
    ours = multihead.Tokenizer.load(MINILM)
    assert ours.vocab_size == 30522
    assert ours.frame == {"before": [101], "after": [102], "pad": 0, "unk": 100}
    assert_same_ids(reference, ours, mixed_corpus(3000, seed=4))


def test_a_tokenizer_of_a_kind_not_read_is_refused_in_one_line(tmp_path):
    from tokenizers import Tokenizer, models
    tok = Tokenizer(models.BPE(unk_token="<unk>", vocab={"<unk>": 0, "a": 1}, merges=[]))
    d = tmp_path / "bpe-plain"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    with pytest.raises(Exception, match=r"model\.type \"BPE\" is not read here"):
        multihead.Tokenizer.load(d)
