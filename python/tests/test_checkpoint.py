import numpy as np
import pytest

import causeway as cw


def test_save_returns_at_once_and_restores_onto_another_sharding(client, tmp_path):
    mesh = cw.make_mesh({"data": 4}, client=client)
    pair = cw.make_mesh({"x": 2, "y": 2}, client=client)
    w = np.arange(48, dtype=np.float32).reshape(8, 6)
    n = np.array([3, -1, 4, -1], dtype=np.int32)
    ckpt = cw.Checkpointer(str(tmp_path / "run"), client=client, keep=2)
    saving = ckpt.save(7, {"w": cw.device_put(w, cw.NamedSharding(mesh, cw.P("data"))),
                           "n": cw.device_put(n, cw.NamedSharding(mesh, cw.P()))})
    saving.wait(timeout=60)
    assert saving.done() and saving.step == 7
    assert ckpt.steps() == [7] and ckpt.latest_step() == 7
    entries = {a["name"]: a for a in ckpt.manifest(7)}
    assert entries["w"]["shape"] == (8, 6) and entries["w"]["pieces"] == 4
    assert entries["n"]["dtype"] == "int32" and entries["n"]["pieces"] == 1
    back = ckpt.restore(7, {"w": cw.NamedSharding(pair, cw.P("y", "x")),
                            "n": cw.NamedSharding(pair, cw.P("x"))})
    np.testing.assert_array_equal(back["w"].fetch(), w)
    np.testing.assert_array_equal(back["n"].fetch(), n)
    assert back["w"].sharding == cw.NamedSharding(pair, cw.P("y", "x"))


def test_a_corrupt_piece_is_an_error_naming_it(client, tmp_path):
    mesh = cw.make_mesh({"data": 2}, client=client)
    ckpt = cw.Checkpointer(str(tmp_path / "run"), client=client)
    ckpt.save(1, {"v": cw.device_put(np.ones(8, np.float32),
                                     cw.NamedSharding(mesh, cw.P("data")))}).wait(timeout=60)
    folder = tmp_path / "run" / "step-00000001"
    piece = sorted(p for p in folder.iterdir() if p.name != "manifest.json")[0]
    data = bytearray(piece.read_bytes())
    data[0] ^= 0xFF
    piece.write_bytes(bytes(data))
    back = ckpt.restore(1, {"v": cw.NamedSharding(mesh, cw.P())})
    with pytest.raises(cw.CausewayError, match=piece.name):
        back["v"].fetch(timeout=60)
    with pytest.raises(cw.NotFoundError, match="no array named 'u'"):
        ckpt.restore(1, {"u": cw.NamedSharding(mesh, cw.P())})
    with pytest.raises(cw.InvalidArgumentError, match="steps must increase"):
        ckpt.save(1, {"v": cw.device_put(np.ones(8, np.float32),
                                         cw.NamedSharding(mesh, cw.P()))}).wait(timeout=60)
