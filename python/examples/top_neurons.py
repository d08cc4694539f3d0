"""For one input token, the neurons of one dense layer that write the most into its output.

A neuron i of an FFN writes h_i * down[:, i] into the output. fflite captures h (the hidden
activations) and can switch a neuron off (a neuron scale of 0), so a neuron's write is exactly the
change of the output when it is switched off. The 32 neurons with the largest |h_i| are the
candidates; each is switched off in turn and the change measured.

usage: python3 top_neurons.py MODEL.fflite [LAYER]
"""
import sys

import numpy as np

import fflite


def main():
    model = fflite.Model(sys.argv[1])
    layer = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    info = model.layer_info(layer)
    if info["kind"] != "dense":
        sys.exit("layer %d is an MoE layer; pick a dense one" % layer)
    session = fflite.Session(model, max_tokens=1, backend="reference")
    x = np.random.default_rng(0).standard_normal((1, model.d_model)).astype(np.float32)
    h = session.set_capture(layer)
    y = session.run(layer, x)
    session.clear_capture(layer)
    d_ff = info["d_ff"]
    candidates = np.argsort(-np.abs(h[0]))[:32]
    scales = np.ones(d_ff, np.float32)
    writes = []
    for i in candidates:
        scales[i] = 0.0
        session.set_neuron_scales(layer, scales)
        writes.append((float(np.linalg.norm(y - session.run(layer, x))), int(i)))
        scales[i] = 1.0
    session.clear_neuron_scales(layer)
    print("layer %d (%s, d_ff %d): the neurons that write the most into the output for this input"
          % (layer, "gated" if info["gated"] else "plain", d_ff))
    for norm, i in sorted(writes, reverse=True)[:10]:
        print("  neuron %5d  h = %+.4f  |write| = %.4f" % (i, h[0, i], norm))


if __name__ == "__main__":
    main()
