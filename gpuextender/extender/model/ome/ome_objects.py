"""OME's ServingRuntime / ClusterServingRuntime, BaseModel / ClusterBaseModel and
InferenceService, parsed from decoded JSON/YAML into frozen dataclasses holding what
runtime selection reads (ome-api.md §3, §4.1, §5).

Validation is by *type*, like Go's JSON decoding: a field with the wrong type (a number
where a string is expected, `priority: "high"`, `supportedModelFormats` not a list, an
integer out of int32/int64 range, a bool where an integer is expected) raises
`InvalidInput` (model/untrusted.py), whose message names the object and the field path:

    ServingRuntime 'team-a/vllm': spec.modelSizeRange.min: expected a string, got int 7

so a caller can skip that one object with one log line. Missing optional fields are
None (Go's nil pointer); an explicit JSON null counts as missing. Values are not
checked against the CRD's enums or minimums (an unknown `operator` means Equal and
`priority: 0` scores 0, as in OME's Go code); `metadata.name` must be a non-empty string
and namespaced kinds must carry `metadata.namespace`.

CRD defaults. Objects read from the API server carry `operator: Equal` and `weight: 1`
on every `modelFormat`/`modelFramework` the CRD default applied to. `crd_defaults=True`
(the default) applies the same defaults to objects that never went through the API
server (files, tests), so they score as they would in a cluster. `crd_defaults=False`
keeps Go's zero values (weight 0 -> the scorer's config default 10/5, §7.8), like OME's
unit tests that build structs by hand. An explicit `weight: 0` stays 0 either way (the
API server defaults only absent fields).

Only what selection and the AcceleratorClass merge read is kept; pod templates,
`protocolVersions`, `acceleratorRequirements` fields other than `acceleratorClasses` and
the model's storage are ignored (not validated either).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuextender.extender.model.untrusted import Fields, described, shown

API_GROUP = "ome.io"
ACCELERATOR_CLASS_ANNOTATION = "ome.io/accelerator-class"  # literal in OME's matcher.go (§4.1)

KIND_SERVING_RUNTIME = "ServingRuntime"
KIND_CLUSTER_SERVING_RUNTIME = "ClusterServingRuntime"
KIND_BASE_MODEL = "BaseModel"
KIND_CLUSTER_BASE_MODEL = "ClusterBaseModel"
KIND_INFERENCE_SERVICE = "InferenceService"
CLUSTER_KINDS = frozenset({KIND_CLUSTER_SERVING_RUNTIME, KIND_CLUSTER_BASE_MODEL})

_CRD_DEFAULT_OPERATOR = "Equal"
_CRD_DEFAULT_WEIGHT = 1
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_UTC = _dt.UTC


def describe_object(kind: str, namespace: str | None, name: str | None) -> str:
    if not name:
        return f"{kind} (unnamed)"
    return f"{kind} {f'{namespace}/{name}' if namespace else name!r}"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    kind: str
    namespace: str | None  # None for cluster-scoped kinds
    name: str

    @property
    def is_cluster(self) -> bool:
        return self.namespace is None

    def __str__(self) -> str:
        return describe_object(self.kind, self.namespace, self.name)


class _Referenced:
    """`name`, `namespace` and `is_cluster` of an object, read from its `ref`."""

    __slots__ = ()
    ref: ObjectRef

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def namespace(self) -> str | None:
        return self.ref.namespace

    @property
    def is_cluster(self) -> bool:
        return self.ref.is_cluster


@dataclass(frozen=True, slots=True)
class ModelFormat:
    """`modelFormat` (also the shape of `modelFramework`): a name and an optional version rule."""

    name: str
    version: str | None = None
    operator: str | None = None  # None: Go's nil, which means Equal
    weight: int = 0  # 0: the scorer's config default (§7.8)


@dataclass(frozen=True, slots=True)
class ModelFramework:
    """`modelFramework` (ModelFrameworkSpec): same shape as ModelFormat, e.g. transformers 4.51.3."""

    name: str
    version: str | None = None
    operator: str | None = None
    weight: int = 0


@dataclass(frozen=True, slots=True)
class DiffusionComponent:
    library: str = ""
    type: str = ""


@dataclass(frozen=True, slots=True)
class DiffusionPipeline:
    class_name: str | None = None
    scheduler: DiffusionComponent | None = None
    text_encoder: DiffusionComponent | None = None
    tokenizer: DiffusionComponent | None = None
    transformer: DiffusionComponent | None = None
    vae: DiffusionComponent | None = None
    additional_components: tuple[tuple[str, DiffusionComponent], ...] = ()  # sorted by key

    def named_components(self) -> tuple[tuple[str, DiffusionComponent | None], ...]:
        """The five fixed components, in OME's check order."""
        return (
            ("scheduler", self.scheduler),
            ("textEncoder", self.text_encoder),
            ("tokenizer", self.tokenizer),
            ("transformer", self.transformer),
            ("vae", self.vae),
        )


@dataclass(frozen=True, slots=True)
class AcceleratorModelConfig:
    """One value of a format entry's `acceleratorConfig` (key: AcceleratorClass name), §3."""

    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    runtime_args_override: tuple[str, ...] = ()
    environment_override: tuple[tuple[str, str], ...] = ()  # sorted by name
    min_memory_per_billion_params: int | None = None  # OME does not read it


@dataclass(frozen=True, slots=True)
class SupportedModelFormat:
    """One entry of `spec.supportedModelFormats` (§3)."""

    name: str | None = None  # legacy label, not used in matching
    model_format: ModelFormat | None = None
    model_framework: ModelFramework | None = None
    model_architecture: str | None = None
    quantization: str | None = None
    diffusion_pipeline: DiffusionPipeline | None = None
    auto_select: bool | None = None
    priority: int | None = None
    accelerator_config: tuple[tuple[str, AcceleratorModelConfig | None], ...] = ()  # sorted by class

    def accelerator_config_for(self, accelerator_class: str) -> AcceleratorModelConfig | None:
        return dict(self.accelerator_config).get(accelerator_class)


@dataclass(frozen=True, slots=True)
class ModelSizeRange:
    min: str | None = None
    max: str | None = None


@dataclass(frozen=True, slots=True)
class ServingRuntime(_Referenced):
    """A ServingRuntime (namespaced) or ClusterServingRuntime (`ref.namespace` None)."""

    ref: ObjectRef
    supported_model_formats: tuple[SupportedModelFormat, ...] = ()
    model_size_range: ModelSizeRange | None = None
    disabled: bool | None = None
    # acceleratorRequirements.acceleratorClasses; None when acceleratorRequirements is absent.
    accelerator_classes: tuple[str, ...] | None = None
    creation_timestamp: _dt.datetime | None = None

    @property
    def is_disabled(self) -> bool:
        return self.disabled is True


@dataclass(frozen=True, slots=True)
class BaseModel(_Referenced):
    """A BaseModel (namespaced) or ClusterBaseModel: the spec fields matching reads (§5)."""

    ref: ObjectRef
    model_format: ModelFormat = ModelFormat(name="")  # non-pointer in Go: absent means name ""
    model_framework: ModelFramework | None = None
    model_architecture: str | None = None
    quantization: str | None = None
    model_parameter_size: str | None = None
    diffusion_pipeline: DiffusionPipeline | None = None
    disabled: bool | None = None


@dataclass(frozen=True, slots=True)
class InferenceService:
    """The InferenceService fields runtime selection reads (§4.1)."""

    ref: ObjectRef
    model_name: str | None = None  # spec.model.name
    runtime_name: str | None = None  # spec.runtime.name
    accelerator_class_annotation: str | None = None  # metadata.annotations["ome.io/accelerator-class"]
    selector_accelerator_class: str | None = None  # spec.acceleratorSelector.acceleratorClass
    engine_accelerator_class: str | None = None  # spec.engine.acceleratorOverride.acceleratorClass
    decoder_accelerator_class: str | None = None  # spec.decoder.acceleratorOverride.acceleratorClass

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def namespace(self) -> str:
        return self.ref.namespace or ""


# --- reading fields -----------------------------------------------------------------


def _timestamp(r: Fields, value: Any, path: str) -> _dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, _dt.datetime):  # PyYAML decodes unquoted timestamps itself
        stamp = value
    elif isinstance(value, str):
        try:
            stamp = _dt.datetime.fromisoformat(value)
        except ValueError:
            r.fail(path, f"{value!r} is not an RFC 3339 time")
    else:
        r.fail(path, f"expected an RFC 3339 time string, got {described(value)}")
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=_UTC)


def _start(obj: Any, kinds: tuple[str, ...]) -> tuple[Fields, ObjectRef, Mapping[str, Any], Mapping[str, Any]]:
    """Kind, apiVersion and metadata; returns the reader, the ref, metadata and spec."""
    r = Fields(describe_object(kinds[0], None, None), code="invalid_object")
    if not isinstance(obj, Mapping):
        r.fail("<object>", f"expected an object, got {described(obj)}")
    kind = obj.get("kind")
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    # Name the object as well as we can before any check can fail.
    said_kind = kind if isinstance(kind, str) and kind else kinds[0]
    name, namespace = meta.get("name"), meta.get("namespace")
    known_name = name if isinstance(name, str) and name else None
    known_namespace = namespace if isinstance(namespace, str) and namespace and said_kind not in CLUSTER_KINDS else None
    r.subject = describe_object(said_kind, known_namespace, known_name)
    if kind not in kinds:
        r.fail("kind", f"expected {' or '.join(kinds)}, got {shown(kind)}")
    r.mapping(obj.get("metadata"), "metadata")
    if known_name is None:
        r.fail("metadata.name", f"expected a non-empty string, got {described(name)}")
    if kind not in CLUSTER_KINDS and known_namespace is None:
        r.fail("metadata.namespace", f"a {kind} is namespaced: expected a non-empty string, got {described(namespace)}")
    api_version = obj.get("apiVersion")
    if api_version is not None and not (isinstance(api_version, str) and api_version.startswith(f"{API_GROUP}/")):
        r.fail("apiVersion", f"expected {API_GROUP}/<version>, got {described(api_version)}")
    spec = r.mapping(obj.get("spec"), "spec") or {}
    ref = ObjectRef(kind, None if kind in CLUSTER_KINDS else known_namespace, known_name)
    return r, ref, meta, spec


def _versioned(r: Fields, raw: Any, path: str, cls: type, crd_defaults: bool) -> Any:
    m = r.mapping(raw, path)
    if m is None:
        return None
    operator = r.string(m.get("operator"), f"{path}.operator")
    weight = r.integer(m.get("weight"), f"{path}.weight", _INT64)
    if crd_defaults:
        operator = _CRD_DEFAULT_OPERATOR if operator is None else operator
        weight = _CRD_DEFAULT_WEIGHT if weight is None else weight
    return cls(
        name=r.string(m.get("name"), f"{path}.name") or "",
        version=r.string(m.get("version"), f"{path}.version"),
        operator=operator,
        weight=weight or 0,
    )


def _component(r: Fields, raw: Any, path: str) -> DiffusionComponent | None:
    m = r.mapping(raw, path)
    if m is None:
        return None
    return DiffusionComponent(
        library=r.string(m.get("library"), f"{path}.library") or "",
        type=r.string(m.get("type"), f"{path}.type") or "",
    )


def _pipeline(r: Fields, raw: Any, path: str) -> DiffusionPipeline | None:
    m = r.mapping(raw, path)
    if m is None:
        return None
    extra = []
    for key, value in r.keyed(m.get("additionalComponents"), f"{path}.additionalComponents"):
        # A Go map of structs (not pointers): a null value decodes as an empty component.
        extra.append((key, _component(r, value, f"{path}.additionalComponents.{key}") or DiffusionComponent()))
    return DiffusionPipeline(
        class_name=r.string(m.get("className"), f"{path}.className"),
        scheduler=_component(r, m.get("scheduler"), f"{path}.scheduler"),
        text_encoder=_component(r, m.get("textEncoder"), f"{path}.textEncoder"),
        tokenizer=_component(r, m.get("tokenizer"), f"{path}.tokenizer"),
        transformer=_component(r, m.get("transformer"), f"{path}.transformer"),
        vae=_component(r, m.get("vae"), f"{path}.vae"),
        additional_components=tuple(extra),
    )


def _accelerator_model_config(r: Fields, raw: Any, path: str) -> AcceleratorModelConfig | None:
    m = r.mapping(raw, path)
    if m is None:
        return None
    tp = r.mapping(m.get("tensorParallelismOverride"), f"{path}.tensorParallelismOverride") or {}
    tp_path = f"{path}.tensorParallelismOverride"
    env = r.keyed(m.get("environmentOverride"), f"{path}.environmentOverride")
    return AcceleratorModelConfig(
        tensor_parallel_size=r.integer(tp.get("tensorParallelSize"), f"{tp_path}.tensorParallelSize", _INT64),
        pipeline_parallel_size=r.integer(tp.get("pipelineParallelSize"), f"{tp_path}.pipelineParallelSize", _INT64),
        data_parallel_size=r.integer(tp.get("dataParallelSize"), f"{tp_path}.dataParallelSize", _INT64),
        runtime_args_override=r.strings(m.get("runtimeArgsOverride"), f"{path}.runtimeArgsOverride") or (),
        environment_override=tuple((k, r.string(v, f"{path}.environmentOverride.{k}") or "") for k, v in env),
        min_memory_per_billion_params=r.integer(
            m.get("minMemoryPerBillionParams"), f"{path}.minMemoryPerBillionParams", _INT64
        ),
    )


def _format_entry(r: Fields, raw: Any, path: str, crd_defaults: bool) -> SupportedModelFormat:
    m = r.mapping(raw, path)
    if m is None:  # a null list element decodes as an empty struct in Go
        return SupportedModelFormat()
    configs = [
        (key, _accelerator_model_config(r, value, f"{path}.acceleratorConfig.{key}"))
        for key, value in r.keyed(m.get("acceleratorConfig"), f"{path}.acceleratorConfig")
    ]
    return SupportedModelFormat(
        name=r.string(m.get("name"), f"{path}.name"),
        model_format=_versioned(r, m.get("modelFormat"), f"{path}.modelFormat", ModelFormat, crd_defaults),
        model_framework=_versioned(r, m.get("modelFramework"), f"{path}.modelFramework", ModelFramework, crd_defaults),
        model_architecture=r.string(m.get("modelArchitecture"), f"{path}.modelArchitecture"),
        quantization=r.string(m.get("quantization"), f"{path}.quantization"),
        diffusion_pipeline=_pipeline(r, m.get("diffusionPipeline"), f"{path}.diffusionPipeline"),
        auto_select=r.boolean(m.get("autoSelect"), f"{path}.autoSelect"),
        priority=r.integer(m.get("priority"), f"{path}.priority", _INT32),
        accelerator_config=tuple(configs),
    )


# --- public parsers ------------------------------------------------------------------


def parse_serving_runtime(obj: Any, *, crd_defaults: bool = True) -> ServingRuntime:
    """A ServingRuntime or ClusterServingRuntime; raises InvalidInput."""
    r, ref, meta, spec = _start(obj, (KIND_SERVING_RUNTIME, KIND_CLUSTER_SERVING_RUNTIME))
    formats = r.items(spec.get("supportedModelFormats"), "spec.supportedModelFormats")
    size_range = r.mapping(spec.get("modelSizeRange"), "spec.modelSizeRange")
    requirements = r.mapping(spec.get("acceleratorRequirements"), "spec.acceleratorRequirements")
    classes = None
    if requirements is not None:
        path = "spec.acceleratorRequirements.acceleratorClasses"
        classes = r.strings(requirements.get("acceleratorClasses"), path) or ()
    return ServingRuntime(
        ref=ref,
        supported_model_formats=tuple(
            _format_entry(r, f, f"spec.supportedModelFormats[{i}]", crd_defaults) for i, f in enumerate(formats)
        ),
        model_size_range=None
        if size_range is None
        else ModelSizeRange(
            min=r.string(size_range.get("min"), "spec.modelSizeRange.min"),
            max=r.string(size_range.get("max"), "spec.modelSizeRange.max"),
        ),
        disabled=r.boolean(spec.get("disabled"), "spec.disabled"),
        accelerator_classes=classes,
        creation_timestamp=_timestamp(r, meta.get("creationTimestamp"), "metadata.creationTimestamp"),
    )


def parse_base_model(obj: Any, *, crd_defaults: bool = True) -> BaseModel:
    """A BaseModel or ClusterBaseModel; raises InvalidInput."""
    r, ref, _meta, spec = _start(obj, (KIND_BASE_MODEL, KIND_CLUSTER_BASE_MODEL))
    model_format = _versioned(r, spec.get("modelFormat"), "spec.modelFormat", ModelFormat, crd_defaults)
    return BaseModel(
        ref=ref,
        model_format=model_format or ModelFormat(name=""),
        model_framework=_versioned(r, spec.get("modelFramework"), "spec.modelFramework", ModelFramework, crd_defaults),
        model_architecture=r.string(spec.get("modelArchitecture"), "spec.modelArchitecture"),
        quantization=r.string(spec.get("quantization"), "spec.quantization"),
        model_parameter_size=r.string(spec.get("modelParameterSize"), "spec.modelParameterSize"),
        diffusion_pipeline=_pipeline(r, spec.get("diffusionPipeline"), "spec.diffusionPipeline"),
        disabled=r.boolean(spec.get("disabled"), "spec.disabled"),
    )


def _override_class(r: Fields, spec: Mapping[str, Any], component: str) -> str | None:
    part = r.mapping(spec.get(component), f"spec.{component}") or {}
    override = r.mapping(part.get("acceleratorOverride"), f"spec.{component}.acceleratorOverride") or {}
    return r.string(override.get("acceleratorClass"), f"spec.{component}.acceleratorOverride.acceleratorClass")


def parse_inference_service(obj: Any) -> InferenceService:
    """An InferenceService; raises InvalidInput."""
    r, ref, meta, spec = _start(obj, (KIND_INFERENCE_SERVICE,))
    annotations = r.mapping(meta.get("annotations"), "metadata.annotations") or {}
    model = r.mapping(spec.get("model"), "spec.model") or {}
    runtime = r.mapping(spec.get("runtime"), "spec.runtime") or {}
    selector = r.mapping(spec.get("acceleratorSelector"), "spec.acceleratorSelector") or {}
    return InferenceService(
        ref=ref,
        model_name=r.string(model.get("name"), "spec.model.name"),
        runtime_name=r.string(runtime.get("name"), "spec.runtime.name"),
        accelerator_class_annotation=r.string(
            annotations.get(ACCELERATOR_CLASS_ANNOTATION), f"metadata.annotations[{ACCELERATOR_CLASS_ANNOTATION}]"
        ),
        selector_accelerator_class=r.string(
            selector.get("acceleratorClass"), "spec.acceleratorSelector.acceleratorClass"
        ),
        engine_accelerator_class=_override_class(r, spec, "engine"),
        decoder_accelerator_class=_override_class(r, spec, "decoder"),
    )
