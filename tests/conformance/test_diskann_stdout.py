"""DiskANN's native code must not write to stdout: CLI commands print JSON there."""

import numpy as np

from citadel.index.diskann import DiskANNIndex


def test_build_load_search_keep_stdout_clean(tmp_path, capfd):
    vectors = np.random.default_rng(0).normal(size=(300, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = DiskANNIndex(32)
    index.add(vectors, np.arange(300))
    index.save(tmp_path)
    _, ids = DiskANNIndex.load(tmp_path).search(vectors[:1], 5)
    assert ids[0][0] == 0
    assert capfd.readouterr().out == ""
