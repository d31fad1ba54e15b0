"""Parsing OME objects into dataclasses: defaults, scopes, and InvalidInput on wrong types."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from gpuextender.extender.model.ome.ome_objects import (
    AcceleratorModelConfig,
    DiffusionComponent,
    ModelFormat,
    ModelFramework,
    ModelSizeRange,
    parse_base_model,
    parse_inference_service,
    parse_serving_runtime,
)
from gpuextender.extender.model.untrusted import InvalidInput
from tests.extender.ome_reference import parse_ome_object

RUNTIME: dict[str, Any] = {
    "apiVersion": "ome.io/v1beta1",
    "kind": "ServingRuntime",
    "metadata": {"name": "vllm", "namespace": "team-a", "creationTimestamp": "2025-06-01T10:00:00Z"},
    "spec": {
        "disabled": False,
        "modelSizeRange": {"min": "1B", "max": "70B"},
        "acceleratorRequirements": {"acceleratorClasses": ["h100", "a100"], "minMemory": 40},
        "supportedModelFormats": [
            {
                "name": "safetensors",
                "modelFormat": {"name": "safetensors", "version": "1.0.0"},
                "modelFramework": {"name": "transformers", "version": "4.51.0", "operator": "GreaterThanOrEqual"},
                "modelArchitecture": "LlamaForCausalLM",
                "quantization": "fp8",
                "autoSelect": True,
                "priority": 2,
                "acceleratorConfig": {
                    "h100": {
                        "tensorParallelismOverride": {"tensorParallelSize": 4},
                        "runtimeArgsOverride": ["--max-model-len=8192"],
                        "environmentOverride": {"B": "2", "A": "1"},
                    }
                },
                "diffusionPipeline": {
                    "className": "FluxPipeline",
                    "vae": {"library": "diffusers", "type": "AutoencoderKL"},
                    "additionalComponents": {"z": {"library": "x"}, "a": None},
                },
            }
        ],
        "containers": [{"name": "engine", "image": "vllm"}],  # ignored
    },
}

MODEL: dict[str, Any] = {
    "apiVersion": "ome.io/v1beta1",
    "kind": "ClusterBaseModel",
    "metadata": {"name": "llama-3-8b"},
    "spec": {
        "modelFormat": {"name": "safetensors", "version": "1.0.0"},
        "modelFramework": {"name": "transformers", "version": "4.51.3"},
        "modelArchitecture": "LlamaForCausalLM",
        "modelParameterSize": "8B",
    },
}

ISVC: dict[str, Any] = {
    "apiVersion": "ome.io/v1beta1",
    "kind": "InferenceService",
    "metadata": {"name": "chat", "namespace": "team-a", "annotations": {"ome.io/accelerator-class": "h100"}},
    "spec": {
        "model": {"name": "llama-3-8b"},
        "runtime": {"name": "vllm"},
        "acceleratorSelector": {"acceleratorClass": "a100", "policy": "Cheapest"},
        "engine": {"acceleratorOverride": {"acceleratorClass": "h200"}},
        "decoder": {"acceleratorOverride": {"policy": "BestFit"}},
    },
}


def with_field(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy with `value` set at a dotted path ([i] indexes lists)."""
    out = copy.deepcopy(obj)
    node: Any = out
    keys = path.replace("[", ".[").split(".")
    for key in keys[:-1]:
        node = node[int(key[1:-1])] if key.startswith("[") else node.setdefault(key, {})
    last = keys[-1]
    node[int(last[1:-1]) if last.startswith("[") else last] = value
    return out


def test_parse_serving_runtime() -> None:
    rt = parse_serving_runtime(RUNTIME)
    assert (rt.name, rt.namespace, rt.is_cluster, rt.is_disabled) == ("vllm", "team-a", False, False)
    assert str(rt.ref) == "ServingRuntime 'team-a/vllm'"
    assert rt.model_size_range == ModelSizeRange("1B", "70B")
    assert rt.accelerator_classes == ("h100", "a100")
    assert rt.creation_timestamp == dt.datetime(2025, 6, 1, 10, tzinfo=dt.UTC)
    (entry,) = rt.supported_model_formats
    assert entry.model_format == ModelFormat("safetensors", "1.0.0", "Equal", 1)  # CRD defaults applied
    assert entry.model_framework == ModelFramework("transformers", "4.51.0", "GreaterThanOrEqual", 1)
    assert (entry.model_architecture, entry.quantization, entry.auto_select, entry.priority) == (
        "LlamaForCausalLM",
        "fp8",
        True,
        2,
    )
    assert entry.accelerator_config_for("h100") == AcceleratorModelConfig(
        tensor_parallel_size=4,
        runtime_args_override=("--max-model-len=8192",),
        environment_override=(("A", "1"), ("B", "2")),
    )
    assert entry.accelerator_config_for("a100") is None
    pipeline = entry.diffusion_pipeline
    assert pipeline is not None and pipeline.class_name == "FluxPipeline"
    assert pipeline.vae == DiffusionComponent("diffusers", "AutoencoderKL") and pipeline.scheduler is None
    assert pipeline.additional_components == (("a", DiffusionComponent()), ("z", DiffusionComponent("x", "")))


def test_go_zero_values_without_crd_defaults() -> None:
    entry = parse_serving_runtime(RUNTIME, crd_defaults=False).supported_model_formats[0]
    assert entry.model_format == ModelFormat("safetensors", "1.0.0", None, 0)
    explicit_zero = with_field(RUNTIME, "spec.supportedModelFormats[0].modelFormat.weight", 0)
    assert parse_serving_runtime(explicit_zero).supported_model_formats[0].model_format == ModelFormat(
        "safetensors", "1.0.0", "Equal", 0
    )


def test_cluster_runtime_and_missing_optionals() -> None:
    rt = parse_serving_runtime(
        {"kind": "ClusterServingRuntime", "metadata": {"name": "sglang", "namespace": "ignored"}}
    )
    assert (rt.is_cluster, rt.namespace, str(rt.ref)) == (True, None, "ClusterServingRuntime 'sglang'")
    assert rt.supported_model_formats == ()
    assert (rt.model_size_range, rt.disabled, rt.accelerator_classes, rt.creation_timestamp) == (None,) * 4
    one_sided = parse_serving_runtime(with_field(RUNTIME, "spec.modelSizeRange", {"max": "13B"}))
    assert one_sided.model_size_range == ModelSizeRange(None, "13B")
    nulls = parse_serving_runtime(with_field(RUNTIME, "spec.supportedModelFormats[0].priority", None))
    assert nulls.supported_model_formats[0].priority is None  # JSON null = absent
    no_classes = parse_serving_runtime(with_field(RUNTIME, "spec.acceleratorRequirements", {}))
    assert no_classes.accelerator_classes == ()


def test_yaml_timestamps_and_naive_times() -> None:
    stamp = dt.datetime(2025, 6, 1, 10)  # what PyYAML gives for an unquoted timestamp
    rt = parse_serving_runtime(with_field(RUNTIME, "metadata.creationTimestamp", stamp))
    assert rt.creation_timestamp == stamp.replace(tzinfo=dt.UTC)


def test_parse_base_model() -> None:
    model = parse_base_model(MODEL)
    assert (model.name, model.is_cluster, model.model_parameter_size) == ("llama-3-8b", True, "8B")
    assert model.model_format.name == "safetensors" and model.model_framework is not None
    assert model.quantization is None and model.diffusion_pipeline is None
    empty = parse_base_model({"kind": "BaseModel", "metadata": {"name": "m", "namespace": "ns"}})
    assert empty.model_format == ModelFormat("")  # non-pointer in Go: present with an empty name


def test_parse_inference_service() -> None:
    isvc = parse_inference_service(ISVC)
    assert (isvc.name, isvc.namespace, isvc.model_name, isvc.runtime_name) == ("chat", "team-a", "llama-3-8b", "vllm")
    assert isvc.accelerator_class_annotation == "h100"
    assert isvc.selector_accelerator_class == "a100"
    assert isvc.engine_accelerator_class == "h200"
    assert isvc.decoder_accelerator_class is None
    bare = parse_inference_service({"kind": "InferenceService", "metadata": {"name": "x", "namespace": "ns"}})
    assert (bare.model_name, bare.runtime_name, bare.accelerator_class_annotation) == (None, None, None)


def test_parse_ome_object_dispatches() -> None:
    assert parse_ome_object(RUNTIME).ref.kind == "ServingRuntime"
    assert parse_ome_object(MODEL).ref.kind == "ClusterBaseModel"
    assert parse_ome_object(ISVC).ref.kind == "InferenceService"
    with pytest.raises(InvalidInput, match=r"^AcceleratorClass 'h100': kind: not an OME kind this module reads"):
        parse_ome_object({"kind": "AcceleratorClass", "metadata": {"name": "h100"}})


def test_wrong_kind_for_the_parser() -> None:
    with pytest.raises(
        InvalidInput, match=r"^ClusterBaseModel 'llama-3-8b': kind: expected ServingRuntime or ClusterServingRuntime"
    ):
        parse_serving_runtime(MODEL)
    with pytest.raises(
        InvalidInput, match=r"^ServingRuntime 'team-a/vllm': kind: expected InferenceService, got 'ServingRuntime'"
    ):
        parse_inference_service(RUNTIME)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            with_field(RUNTIME, "spec.modelSizeRange.min", 7),
            "ServingRuntime 'team-a/vllm': spec.modelSizeRange.min: expected a string, got int 7",
        ),
        (
            with_field(RUNTIME, "spec.supportedModelFormats[0].priority", "high"),
            "ServingRuntime 'team-a/vllm': spec.supportedModelFormats[0].priority: expected an integer, got str 'high'",
        ),
        (
            with_field(RUNTIME, "spec.supportedModelFormats", {"name": "x"}),
            "ServingRuntime 'team-a/vllm': spec.supportedModelFormats: expected a list, got dict",
        ),
        (
            with_field(RUNTIME, "spec.supportedModelFormats[0].priority", True),
            "spec.supportedModelFormats[0].priority: expected an integer, got bool True",
        ),
        (
            with_field(RUNTIME, "spec.supportedModelFormats[0].priority", 2.0),
            "spec.supportedModelFormats[0].priority: expected an integer, got float 2.0",
        ),
        (
            with_field(RUNTIME, "spec.supportedModelFormats[0].priority", 2**31),
            "spec.supportedModelFormats[0].priority: 2147483648 is out of range",
        ),
        (
            with_field(RUNTIME, "spec.supportedModelFormats[0].modelFormat.weight", 2**63),
            "spec.supportedModelFormats[0].modelFormat.weight: 9223372036854775808 is out of range",
        ),
        (
            with_field(RUNTIME, "spec.supportedModelFormats[0].modelFormat.version", 1.0),
            "spec.supportedModelFormats[0].modelFormat.version: expected a string, got float 1.0",
        ),
        (
            with_field(RUNTIME, "spec.supportedModelFormats[0].autoSelect", "yes"),
            "spec.supportedModelFormats[0].autoSelect: expected true or false, got str 'yes'",
        ),
        (
            with_field(RUNTIME, "spec.supportedModelFormats[0].modelFramework", "transformers"),
            "spec.supportedModelFormats[0].modelFramework: expected an object, got str",
        ),
        (
            with_field(RUNTIME, "spec.supportedModelFormats[0].diffusionPipeline.vae.library", 3),
            "spec.supportedModelFormats[0].diffusionPipeline.vae.library: expected a string",
        ),
        (
            with_field(RUNTIME, "spec.supportedModelFormats[0].acceleratorConfig.h100.environmentOverride.A", 1),
            "spec.supportedModelFormats[0].acceleratorConfig.h100.environmentOverride.A: expected a string",
        ),
        (
            with_field(RUNTIME, "spec.acceleratorRequirements.acceleratorClasses", "h100"),
            "spec.acceleratorRequirements.acceleratorClasses: expected a list",
        ),
        (
            with_field(RUNTIME, "spec.acceleratorRequirements.acceleratorClasses", ["h100", 7]),
            "spec.acceleratorRequirements.acceleratorClasses[1]: expected a string, got int 7",
        ),
        (with_field(RUNTIME, "spec.disabled", "true"), "spec.disabled: expected true or false"),
        (with_field(RUNTIME, "spec", ["x"]), "ServingRuntime 'team-a/vllm': spec: expected an object"),
        (with_field(RUNTIME, "metadata.creationTimestamp", "yesterday"), "metadata.creationTimestamp: 'yesterday'"),
        (with_field(RUNTIME, "metadata.creationTimestamp", 1700000000), "metadata.creationTimestamp: expected"),
        (with_field(RUNTIME, "metadata.name", ""), "ServingRuntime (unnamed): metadata.name: expected a non-empty"),
        (
            with_field(RUNTIME, "metadata.namespace", None),
            "ServingRuntime 'vllm': metadata.namespace: a ServingRuntime",
        ),
        (with_field(RUNTIME, "apiVersion", "apps/v1"), "apiVersion: expected ome.io/<version>"),
        ("not an object", "ServingRuntime (unnamed): <object>: expected an object"),
        (with_field(MODEL, "spec.modelParameterSize", 8), "ClusterBaseModel 'llama-3-8b': spec.modelParameterSize"),
        (with_field(MODEL, "spec.modelFormat.name", ["x"]), "ClusterBaseModel 'llama-3-8b': spec.modelFormat.name"),
        (with_field(MODEL, "spec.quantization", 8), "spec.quantization: expected a string"),
        (
            with_field(ISVC, "metadata.annotations", {"ome.io/accelerator-class": 1}),
            "InferenceService 'team-a/chat': metadata.annotations[ome.io/accelerator-class]: expected a string",
        ),
        (
            with_field(ISVC, "spec.engine.acceleratorOverride", "h100"),
            "InferenceService 'team-a/chat': spec.engine.acceleratorOverride: expected an object",
        ),
        (
            with_field(ISVC, "spec.acceleratorSelector.acceleratorClass", 100),
            "spec.acceleratorSelector.acceleratorClass: expected a string",
        ),
        (with_field(ISVC, "spec.model.name", 3), "InferenceService 'team-a/chat': spec.model.name"),
    ],
)
def test_invalid_objects_name_the_object_and_field(obj: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_ome_object(obj) if isinstance(obj, dict) else parse_serving_runtime(obj)
    assert message in str(caught.value)


def test_invalid_object_carries_its_parts() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_serving_runtime(with_field(RUNTIME, "spec.modelSizeRange.max", 70))
    err = caught.value
    assert (err.subject, err.path, err.code) == (
        "ServingRuntime 'team-a/vllm'",
        "spec.modelSizeRange.max",
        "invalid_object",
    )
    assert isinstance(err, ValueError)
