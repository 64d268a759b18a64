import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))


@pytest.fixture(scope="session")
def small_tokenizer_dir(tmp_path_factory):
    """A tokenizer built by build_tokenizer.py from 3000 train problems (+ GSM8K train text)."""
    import arith_data
    import build_tokenizer

    d = tmp_path_factory.mktemp("tok")
    train = arith_data.generate_split("train", 3000)
    arith_data.write_jsonl(d / "train.jsonl", train)
    tok = build_tokenizer.train_tokenizer(d / "train.jsonl", 2048)
    build_tokenizer.write_tokenizer_files(tok, 2048, d / "out")
    return d / "out"
