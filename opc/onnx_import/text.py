"""TfIdfVectorizer: n-gram counts from comparisons at run time."""

from __future__ import annotations

import numpy as np

from opc.dialects import opc as o
from opc.onnx_import.common import F32, Values, numpy_of
from opc.onnx_import.graph import Node, converter


@converter("TfIdfVectorizer", since=9)
def tfidf_vectorizer(node: Node) -> Values:
    """Y[b, ngram_indexes[g]] += the number of starts i where the pool n-gram g (of length n between
    min_gram_length and max_gram_length) occurs at x[b, i], x[b, i + d], ..., x[b, i + (n - 1) d], for
    every skip distance d = 1 .. max_skip_count + 1 (1 only for unigrams), as onnxruntime counts: per
    length one product of `equal`s of shifted slices with the pool's columns, summed over the starts,
    mapped to the outputs by a 0/1 matmul. IDF clips each n-gram's count to 1; IDF and TFIDF scale it by
    the n-gram's weight (in pool order, as the spec and onnxruntime have it; ONNX's reference indexes the
    weights by output coordinate)."""
    pool = node.attr("pool_int64s")
    if pool is None:
        raise node.fail("pool_strings: string n-grams are not supported (opc has no strings)")
    pool = np.asarray(pool, np.int64)
    starts = [int(s) for s in node.attr("ngram_counts")]
    indexes = np.asarray(node.attr("ngram_indexes"), np.int64)
    lo, hi = int(node.attr("min_gram_length")), int(node.attr("max_gram_length"))
    skips = int(node.attr("max_skip_count"))
    mode = node.attr("mode")
    if mode not in ("TF", "IDF", "TFIDF") or not 1 <= lo <= hi or skips < 0:
        raise node.fail(f"mode '{mode}', min/max_gram_length {lo}/{hi}, max_skip_count {skips} are not valid")
    shape = node.shape(0)
    if len(shape) not in (1, 2):
        raise node.fail(f"the input must be [C] or [B, C], got shape {list(shape)}")
    e = node.e
    b, c = (1, shape[0]) if len(shape) == 1 else shape
    x = e.reshape(node.input(0), [b, 1, c])
    dtype = numpy_of(x)
    m = int(indexes.max()) + 1
    weights = node.attr("weights")
    if weights is not None and len(weights) != len(indexes):
        raise node.fail(f"{len(weights)} weights for {len(indexes)} n-grams")
    y = None
    ends = starts[1:] + [len(pool)]
    counted = 0  # n-grams of the pool so far (ngram_indexes lists them in pool order)
    for n, (start, end) in enumerate(zip(starts, ends), 1):
        grams = pool[start:end].reshape(-1, n) if end > start else np.zeros((0, n), np.int64)
        first, counted = counted, counted + len(grams)
        if not lo <= n <= hi or not len(grams):
            continue
        counts = None
        for d in range(1, (1 if n == 1 else skips + 1) + 1):
            length = c - (n - 1) * d
            if length < 1:
                break
            match = None
            for k in range(n):
                window = e.value(o.SliceOp(x, [0, 0, k * d], [b, 1, k * d + length]))
                column = e.constant(grams[:, k].astype(dtype).reshape(1, -1, 1))
                hit = e.cast(e.value(o.EqualOp(window, column)), F32)
                match = hit if match is None else e.mul(match, hit)
            found = e.reduce_sum(match, [2])  # [B, n-grams]
            counts = found if counts is None else e.add(counts, found)
        if counts is None:
            continue
        if mode == "IDF":
            counts = e.value(o.MinimumOp(counts, e.full(1.0, counts)))
        if mode != "TF" and weights is not None:
            counts = e.mul(counts, e.constant(np.asarray(weights[first:counted], np.float32)))
        onehot = np.zeros((len(grams), m), np.float32)
        onehot[np.arange(len(grams)), indexes[first:counted]] = 1.0
        part = e.matmul(counts, e.constant(onehot))
        y = part if y is None else e.add(y, part)
    if y is None:
        y = e.constant(np.zeros((b, m), np.float32))
    return [e.reshape(y, [m] if len(shape) == 1 else [b, m])]
