"""Each zoo architecture runs, exports to ONNX and gets an op-compat verdict for `host`.

Reduced sizes (width/depth/resolution) keep this in the CI budget; the layouts are the
published ones, checked by their parameter counts at full size."""

from __future__ import annotations

import pytest
import torch

from .conftest import zoo_module

# (module, build kwargs at reduced size, input shape, classes)
SMALL = {
    "mobilenetv2": ({"width": 0.35}, (2, 3, 32, 32), 10),
    "mobilenetv3": ({"width": 0.5}, (2, 3, 32, 32), 10),
    "resnet18": ({"width": 0.25}, (2, 3, 32, 32), 10),
    "efficientnet": ({"width": 0.5, "depth": 0.5}, (2, 3, 32, 32), 10),
    "vit": ({"image_size": 32, "patch": 8, "dim": 48, "depth": 2, "heads": 3}, (2, 3, 32, 32),
            10),
    "kws_gru": ({"hidden": 32, "layers": 1}, (2, 40, 50), 12),
}

# parameters at 1000 classes, as published (torchvision / timm's deit_tiny_patch16_224)
PUBLISHED_PARAMS = {"mobilenetv2": 3_504_872, "mobilenetv3": 2_542_856, "resnet18": 11_689_512,
                    "efficientnet": 5_288_548, "vit": 5_717_416}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_full_size_model_has_the_published_parameter_count(name):
    model = zoo_module(name).build(num_classes=1000)
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED_PARAMS[name]


@pytest.mark.parametrize("name", sorted(SMALL))
def test_reduced_model_forward_gives_one_logit_per_class(name):
    kwargs, shape, classes = SMALL[name]
    model = zoo_module(name).build(**kwargs)
    with torch.no_grad():
        out = model(torch.randn(shape))
    assert out.shape == (shape[0], classes)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", sorted(SMALL))
def test_same_seed_builds_the_same_weights(name):
    kwargs, _, _ = SMALL[name]
    a, b = zoo_module(name).build(**kwargs), zoo_module(name).build(**kwargs)
    c = zoo_module(name).build(**kwargs, seed=1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa if sa[k].is_floating_point())


@pytest.mark.parametrize("size", [32, 96])
def test_vit_size_callables_take_their_input_size(size):
    vit = zoo_module("vit")
    with torch.no_grad():
        assert vit.__dict__[f"build_small_{size}"]()(torch.zeros(1, 3, size, size)).shape == (1, 10)


def _host_targets():
    from edgesmith import profiles
    from edgesmith.pipeline.stages import compat_targets, resolve_targets

    return compat_targets(resolve_targets(profiles.load("host"), None, "host"))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_reduced_model_exports_to_onnx_and_gets_a_compat_verdict_per_host_target(name, tmp_path):
    import numpy as np
    import onnxruntime as ort

    from edgesmith.convert.compat import check
    from edgesmith.convert.export import export_onnx

    kwargs, shape, classes = SMALL[name]
    model = zoo_module(name).build(**kwargs)
    path = export_onnx(model, shape, tmp_path / f"{name}.onnx")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = ort.InferenceSession(str(path)).run(None, {"input": x})[0]
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)

    targets = _host_targets()
    report = check(path, targets)
    assert report.targets == [spec.name for spec, _ in targets]
    assert len(report.rows) > 5
    for row in report.rows:
        assert set(row.status.values()) <= {"supported", "lowered", "unsupported"}
