"""The Python binding against the C API on the tests' two-layer model (make_test_model: a dense
pre-norm SwiGLU-style layer with the residual, an MoE layer with a shared expert).
Run by ctest with FFLITE_LIBRARY, FFLITE_HEADER and FFLITE_TEST_MODEL set."""
import os
import unittest

import numpy as np

import fflite

MODEL = os.environ["FFLITE_TEST_MODEL"]


class BindingTest(unittest.TestCase):
    def setUp(self):
        self.model = fflite.Model(MODEL)
        self.x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)

    def test_model_and_layer_info(self):
        self.assertEqual((self.model.num_layers, self.model.d_model), (2, 16))
        dense = self.model.layer_info(0)
        self.assertEqual((dense["kind"], dense["d_ff"], dense["d_ff_padded"]), ("dense", 40, 64))
        self.assertEqual((dense["norm"], dense["norm_placement"], dense["residual_included"]),
                         ("rms", "pre", 1))
        self.assertEqual(dense["up_bytes"], 64 * 16 * 4)
        moe = self.model.layer_info(1)
        self.assertEqual((moe["kind"], moe["num_experts"], moe["top_k"]), ("moe", 4, 2))
        self.assertEqual(fflite.version().count("."), 2)

    def test_runs_match_the_reference_and_in_place_keeps_the_bits(self):
        ref = fflite.Session(self.model, backend="reference", max_tokens=4)
        cpu = fflite.Session(self.model, backend="xnnpack", max_tokens=4)
        for layer in range(2):
            want = ref.run(layer, self.x)
            got = cpu.run(layer, self.x)
            # The f32 tolerance of tests/testing/tolerances.h (kF32RelTol), against each row's RMS.
            scale = np.sqrt(np.mean(want.astype(np.float64) ** 2, axis=1, keepdims=True))
            self.assertTrue(np.all(np.abs(got - want) <= 2e-4 * (np.abs(want) + scale)))
            out = np.empty_like(self.x)
            self.assertIs(cpu.run(layer, self.x, out), out)  # written in place, not copied
            same = self.x.copy()
            cpu.run(layer, same, same)
            self.assertTrue(np.array_equal(same, got))

    def test_arrays_are_never_copied_so_wrong_ones_are_refused(self):
        s = fflite.Session(self.model, max_tokens=4)
        with self.assertRaisesRegex(ValueError, "float32"):
            s.run(0, self.x.astype(np.float64))
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            s.run(0, np.asfortranarray(self.x))
        with self.assertRaisesRegex(ValueError, "2-D"):
            s.run(0, self.x[:, :8].copy())

    def test_errors_carry_the_status_and_message(self):
        s = fflite.Session(self.model, max_tokens=4)
        with self.assertRaises(fflite.FfliteError) as e:
            s.run(2, self.x)
        self.assertEqual(e.exception.status, "OUT_OF_RANGE")
        self.assertIn("layer 2 is out of range: the model has 2 layers", str(e.exception))
        with self.assertRaises(fflite.FfliteError) as e:
            s.run(0, np.zeros((5, 16), np.float32))
        self.assertIn("max_tokens = 4", e.exception.message)
        with self.assertRaises(fflite.FfliteError) as e:
            fflite.Model(MODEL + ".missing")
        self.assertEqual(e.exception.status, "NOT_FOUND")

    def test_capture_and_neuron_edits(self):
        s = fflite.Session(self.model, backend="reference", max_tokens=4)
        h = s.set_capture(0)
        y = s.run(0, self.x)
        self.assertEqual(h.shape, (4, 40))
        self.assertGreater(np.abs(h).sum(), 0)
        s.clear_capture(0)
        s.set_neuron_scales(0, np.ones(40, np.float32))
        self.assertTrue(np.array_equal(s.run(0, self.x), y))
        scales = np.ones(40, np.float32)
        top = int(np.argmax(np.abs(h[0])))
        scales[top] = 0.0
        s.set_neuron_scales(0, scales)
        self.assertFalse(np.array_equal(s.run(0, self.x)[0], y[0]))
        s.clear_neuron_scales(0)
        self.assertTrue(np.array_equal(s.run(0, self.x), y))
        hm, experts, weights = s.set_capture(1, routing=True)
        s.run(1, self.x)
        self.assertEqual(hm.shape, (4, 2, 40))
        self.assertTrue(np.all((experts[:4] >= 0) & (experts[:4] < 4)))
        self.assertTrue(np.all(weights[:4] > 0))

    def test_prepare_memory_and_options(self):
        s = fflite.Session(self.model, backend="xnnpack", max_tokens=4, activations="float")
        s.prepare()
        mem = s.memory()
        self.assertEqual(mem["model_bytes"], os.path.getsize(MODEL))
        self.assertGreater(mem["scratch_bytes"], 0)
        with self.assertRaisesRegex(ValueError, "activations"):
            fflite.Session(self.model, activations="int4")
        with self.assertRaises(fflite.FfliteError) as e:
            fflite.Session(self.model, threads=-1)
        self.assertEqual(e.exception.status, "INVALID_ARGUMENT")
        self.assertIn("features", fflite.platform_info())


if __name__ == "__main__":
    unittest.main()
