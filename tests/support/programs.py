"""MLIR programs that several test files run (the scheduler's, the CUDA emitter's)."""


def row_src(shape: tuple[int, ...], dt: str = "f32") -> str:
    """Softmax, layer norm, log_softmax and softmax's backward composed from primitives
    over the last axis, plus plain row reductions."""
    full = f"tensor<{'x'.join(map(str, shape))}x{dt}>"
    row = f"tensor<{'x'.join(map(str, shape[:-1]))}x1x{dt}>"
    vec = f"tensor<{shape[-1]}x{dt}>"
    flat = f"tensor<{'x'.join(map(str, shape[:-1]))}x{dt}>"
    ax = len(shape) - 1
    red = f"{{axes = array<i64: {ax}>, keepdim = true}}"

    def reduce(kind: str, x: str, out: str, attrs: str = red, to: str = row) -> str:
        return f"  {out} = opc.reduce_{kind} {x} {attrs} : ({full}) -> {to}\n"

    # softmax and log_softmax share their max-shifted exp and its row sum (%s, %e, %z)
    shifted_exp_sum = (reduce("max", "%x", "%m")
                       + f"  %s = opc.sub %x, %m : ({full}, {row}) -> {full}\n"
                       f"  %e = opc.exp %s : ({full}) -> {full}\n"
                       + reduce("sum", "%e", "%z"))
    return (
        f"func.func @softmax(%x: {full}) -> {full} {{\n"
        + shifted_exp_sum
        + f"  %y = opc.div %e, %z : ({full}, {row}) -> {full}\n"
        f"  func.return %y : {full}\n}}\n"
        f"func.func @log_softmax(%x: {full}) -> {full} {{\n"
        + shifted_exp_sum
        + f"  %l = opc.log %z : ({row}) -> {row}\n"
        f"  %y = opc.sub %s, %l : ({full}, {row}) -> {full}\n"
        f"  func.return %y : {full}\n}}\n"
        f"func.func @layer_norm(%x: {full}, %g: {vec}, %b: {vec}) -> ({full}, {row}, {row}) {{\n"
        + reduce("mean", "%x", "%mu")
        + f"  %d = opc.sub %x, %mu : ({full}, {row}) -> {full}\n"
        f"  %sq = opc.mul %d, %d : ({full}, {full}) -> {full}\n"
        + reduce("mean", "%sq", "%var")
        + f"  %eps = opc.full {{value = 1.0e-5 : f64}} : () -> {row}\n"
        f"  %ve = opc.add %var, %eps : ({row}, {row}) -> {row}\n"
        f"  %r = opc.rsqrt %ve : ({row}) -> {row}\n"
        f"  %n = opc.mul %d, %r : ({full}, {row}) -> {full}\n"
        f"  %ng = opc.mul %n, %g : ({full}, {vec}) -> {full}\n"
        f"  %y = opc.add %ng, %b : ({full}, {vec}) -> {full}\n"
        f"  func.return %y, %mu, %r : {full}, {row}, {row}\n}}\n"
        f"func.func @softmax_grad(%y: {full}, %dy: {full}) -> {full} {{\n"
        f"  %p = opc.mul %dy, %y : ({full}, {full}) -> {full}\n"
        + reduce("sum", "%p", "%s")
        + f"  %c = opc.sub %dy, %s : ({full}, {row}) -> {full}\n"
        f"  %dx = opc.mul %y, %c : ({full}, {full}) -> {full}\n"
        f"  func.return %dx : {full}\n}}\n"
        f"func.func @rows(%x: {full}) -> ({flat}, {flat}, {flat}) {{\n"
        + reduce("sum", "%x", "%s", f"{{axes = array<i64: {ax}>}}", flat)
        + reduce("max", "%x", "%hi", f"{{axes = array<i64: {ax}>}}", flat)
        + reduce("min", "%x", "%lo", f"{{axes = array<i64: {ax}>}}", flat)
        + f"  func.return %s, %hi, %lo : {flat}, {flat}, {flat}\n}}\n"
    )
