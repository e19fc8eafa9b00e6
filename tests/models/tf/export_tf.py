"""Export small Keras models and TF functions with tf2onnx at its default opset, and record TF's own
outputs:

    python -m venv --system-site-packages /tmp/tf-env
    /tmp/tf-env/bin/pip install tensorflow-cpu tf2onnx       # 2.21.0 and 1.17.0 wrote these
    /tmp/tf-env/bin/python tests/models/tf/export_tf.py

Each model is traced as a tf.function of fixed input shapes and converted by tf2onnx.convert.
from_function (Keras 3 models go through it as well). Per model NAME this writes NAME.onnx and
NAME.npz (x0, ... the inputs, want TF's output, inference mode). The CNN is also written at opset
11 (cnn_opset11), the one that defines the tf_half_pixel_for_nn its nearest Resize has (at 15 too),
and with its batch open (cnn_open_batch: tf2onnx casts the run-time shape to int32).
`export_tf.py --measure resnet50 efficientnet` converts those keras.applications (weights=None,
logits out) to a temporary folder and prints TF's largest output and opc's and onnxruntime's largest
differences from TF, writing nothing here: their weights are 102 and 21 MB."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf2onnx  # noqa: E402
from keras import layers  # noqa: E402

OUT = Path(__file__).resolve().parent


def cnn() -> keras.Model:
    """Conv2D, BatchNorm, pooling, UpSampling2D (nearest and bilinear) and a nearest resize to an odd size."""
    x = keras.Input((16, 16, 3), batch_size=2)
    y = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    y = layers.BatchNormalization()(y)
    y = layers.MaxPooling2D(2)(y)
    y = layers.UpSampling2D(2, interpolation="nearest")(y)
    y = layers.Conv2D(8, 3, strides=2, padding="valid")(y)
    y = layers.UpSampling2D(2, interpolation="bilinear")(y)
    y = layers.Resizing(11, 9, interpolation="nearest")(y)
    y = layers.AveragePooling2D(2)(y)
    y = layers.GlobalAveragePooling2D()(y)
    return keras.Model(x, layers.Dense(5, activation="softmax")(y))


def separable() -> keras.Model:
    x = keras.Input((12, 12, 4), batch_size=2)
    y = layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, activation="relu6")(x)
    y = layers.SeparableConv2D(8, 3, strides=2, padding="same")(y)
    y = layers.BatchNormalization()(y)
    return keras.Model(x, layers.Flatten()(y))


def conv1d() -> keras.Model:
    x = keras.Input((20, 6), batch_size=2)
    y = layers.Conv1D(8, 3, padding="causal", dilation_rate=2, activation="swish")(x)
    y = layers.Conv1D(8, 5, strides=2)(y)
    y = layers.MaxPooling1D(2)(y)
    return keras.Model(x, layers.GlobalMaxPooling1D()(y))


def conv3d() -> keras.Model:
    x = keras.Input((6, 8, 8, 2), batch_size=1)
    y = layers.Conv3D(4, 3, padding="same", activation="relu")(x)
    y = layers.MaxPooling3D(2)(y)
    y = layers.Conv3D(4, 2)(y)
    return keras.Model(x, layers.Flatten()(y))


def recurrent(kind: str) -> keras.Model:
    x = keras.Input((7, 5), batch_size=2)
    if kind == "lstm":
        y = layers.LSTM(8, return_sequences=True)(x)
    elif kind == "gru":
        y = layers.GRU(8, return_sequences=True)(x)
    else:
        y = layers.Bidirectional(layers.LSTM(8, return_sequences=True))(x)
    return keras.Model(x, layers.Dense(3)(y))


def attention() -> keras.Model:
    x = keras.Input((6, 16), batch_size=2)
    y = layers.MultiHeadAttention(num_heads=2, key_dim=8)(x, x)
    y = layers.LayerNormalization()(x + y)
    return keras.Model(x, layers.Dense(4)(y))


W = np.random.default_rng(1).standard_normal((6, 6)).astype(np.float32) * 0.3  # a NumPy array: tf2onnx
# makes a captured tensor a graph input, a NumPy one a constant


def while_loop(x):  # noqa: ANN001, ANN201
    """x @ W, tanh, until the norm is below 1 or 10 steps: a trip count that depends on the data."""
    def cond(i, h):  # noqa: ANN001, ANN202
        return tf.logical_and(i < 10, tf.norm(h) > 1.0)

    def body(i, h):  # noqa: ANN001, ANN202
        return i + 1, tf.tanh(tf.matmul(h, W)) * 0.8

    return tf.while_loop(cond, body, (tf.constant(0), x))[1]


def cond(x):  # noqa: ANN001, ANN201
    return tf.cond(tf.reduce_sum(x) > 0, lambda: tf.nn.relu(x) * 2.0, lambda: tf.sigmoid(x) - x)


def map_fn(x):  # noqa: ANN001, ANN201
    return tf.map_fn(lambda row: tf.reduce_max(row, axis=0) + tf.cumsum(row, axis=0)[-1], x)


BOXES = np.array([[0.1, 0.2, 0.8, 0.9], [-0.2, 0.0, 0.6, 1.3], [0.4, 0.6, 0.4, 0.6]], np.float32)


def crop_and_resize(x):  # noqa: ANN001, ANN201
    """Boxes of either image (one partly outside: TF's extrapolation value 0, one a point), bilinear and
    nearest. No point lies halfway between pixels: there TF rounds up, tf2onnx's Resize (nearest_mode
    left at round_prefer_floor) down."""
    return tf.concat([tf.image.crop_and_resize(x, BOXES, [0, 1, 0], [5, 4], method=method)
                      for method in ("bilinear", "nearest")], axis=-1)


def keras_models() -> dict:
    return {"cnn": (cnn, [(2, 16, 16, 3)]), "separable": (separable, [(2, 12, 12, 4)]),
            "conv1d": (conv1d, [(2, 20, 6)]), "conv3d": (conv3d, [(1, 6, 8, 8, 2)]),
            "lstm": (lambda: recurrent("lstm"), [(2, 7, 5)]), "gru": (lambda: recurrent("gru"), [(2, 7, 5)]),
            "bilstm": (lambda: recurrent("bilstm"), [(2, 7, 5)]), "attention": (attention, [(2, 6, 16)])}


def functions() -> dict:
    return {"while_loop": (while_loop, [(3, 6)]), "cond": (cond, [(4, 5)]), "map_fn": (map_fn, [(3, 4, 5)]),
            "crop_and_resize": (crop_and_resize, [(2, 8, 8, 2)])}


def set_statistics(model: keras.Model) -> None:
    """Running statistics other than 0 and 1, so that they count."""
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            n = layer.moving_mean.shape[0]
            layer.moving_mean.assign(np.linspace(-0.5, 0.5, n).astype(np.float32))
            layer.moving_variance.assign(np.linspace(0.5, 1.5, n).astype(np.float32))


def export(name: str, fn, shapes: list[tuple], opset: int | None = None, out: Path = OUT,  # noqa: ANN001
           open_batch: bool = False) -> tuple[Path, dict]:
    """open_batch: the first dim left open (None) in the signature, as tf2onnx then writes it."""
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    spec = [tf.TensorSpec((None, *s[1:]) if open_batch else s, tf.float32, name=f"x{i}") for i, s in enumerate(shapes)]
    traced = tf.function(fn, input_signature=spec)
    want = traced(*xs).numpy()
    proto, _ = tf2onnx.convert.from_function(traced, input_signature=spec, opset=opset)
    # tf2onnx freezes variables, but leaves a captured constant (Keras' Normalization mean) a graph input
    captured = {inner.name: outer.numpy() for outer, inner in traced.get_concrete_function().graph.captures
                if outer.dtype != tf.resource}
    for frozen in [i for i in proto.graph.input if i.name in captured]:
        proto.graph.initializer.append(onnx.numpy_helper.from_array(captured[frozen.name], frozen.name))
        proto.graph.input.remove(frozen)
    path = out / f"{name}.onnx"
    path.write_bytes(proto.SerializeToString())
    data = {"want": want, **{f"x{i}": x for i, x in enumerate(xs)}}
    np.savez(out / f"{name}.npz", **data)
    return path, data


def measure(names: list[str]) -> None:
    """Large keras.applications, converted to a temporary folder and compared, not committed."""
    import onnxruntime as ort

    import opc

    apps = {"resnet50": lambda: keras.applications.ResNet50(weights=None, classifier_activation=None),
            "efficientnet": lambda: keras.applications.EfficientNetB0(weights=None, classifier_activation=None)}
    folder = Path(tempfile.mkdtemp())
    for name in names:
        keras.utils.set_random_seed(0)
        model = apps[name]()
        path, data = export(name, lambda x, m=model: m(x, training=False), [(1, 224, 224, 3)], out=folder)
        proto = path.read_bytes()
        opset = next(o.version for o in onnx.load(str(path)).opset_import if o.domain in ("", "ai.onnx"))
        got = opc.load_onnx(str(path))(data["x0"])
        got = got[0] if isinstance(got, (list, tuple)) else got
        ort_out = ort.InferenceSession(proto).run(None, {"x0": data["x0"]})[0]
        print(f"{name}: opset {opset}, {len(proto) / 1e6:.0f} MB, max |TF| {np.abs(data['want']).max():.2e}, "
              f"max |opc - TF| {np.abs(got - data['want']).max():.2e}, max |onnxruntime - TF| "
              f"{np.abs(ort_out - data['want']).max():.2e}, max |opc - onnxruntime| {np.abs(got - ort_out).max():.2e}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        measure(sys.argv[2:])
        sys.exit()
    for name, (build, shapes) in keras_models().items():
        keras.utils.set_random_seed(0)
        model = build()
        set_statistics(model)
        export(name, lambda *xs, m=model: m(*xs, training=False), shapes)
        if name == "cnn":
            export("cnn_opset11", lambda *xs, m=model: m(*xs, training=False), shapes, opset=11)
            export("cnn_open_batch", lambda *xs, m=model: m(*xs, training=False), shapes, open_batch=True)
    for name, (fn, shapes) in functions().items():
        export(name, fn, shapes)
