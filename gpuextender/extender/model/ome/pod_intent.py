"""What an OME pod is: its InferenceService, component, runtime and model, read
from the labels and annotations OME writes on engine/decoder/router pods
(ome-api.md §6), plus the accelerator-class intent in OME's order of precedence.

Class intent, highest first:
  1. the component's `acceleratorOverride.acceleratorClass` (engine/decoder),
  2. the InferenceService's `spec.acceleratorSelector.acceleratorClass`,
  3. the annotation `ome.io/accelerator-class`, on the pod, then on the InferenceService.
Levels 1-2 follow OME (`pkg/acceleratorclassselector/selector.go:
getAcceleratorClassByName`, the first non-nil pointer wins): a level that is present
but empty (`acceleratorClass: ""`) names no class and masks every level below it, so
the policy decides, as in `class_policy.resolve_class_request`. Level 3 is an addition
(OME's class selector never reads the annotation; docs/architecture.md, "Deviations from OME").
Policy: the component override's non-empty `policy`, then the InferenceService's, then
the configured default. Router pods are CPU-only and always neutral.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuextender.extender.model.untrusted import object_at

INFERENCE_SERVICE_LABEL = "ome.io/inferenceservice"
COMPONENT_LABEL = "component"
ROLES = ("engine", "decoder")  # the two roles of a disaggregated InferenceService (prefill, decode)
RUNTIME_LABEL = "serving-runtime"
BASE_MODEL_LABEL = "base-model-name"
CLASS_ANNOTATION = "ome.io/accelerator-class"
ACCELERATED_COMPONENTS = ("engine", "decoder")  # the router gets no accelerator (§3)


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """What the pod's own metadata says. Empty strings where OME wrote nothing."""

    namespace: str
    inference_service: str
    component: str
    runtime: str
    base_model: str
    class_annotation: str

    @property
    def is_ome(self) -> bool:
        return bool(self.inference_service)

    @property
    def disaggregated_role(self) -> str:
        """ "engine" or "decoder" for a pod of a disaggregated InferenceService's role (prefill and
        decode: each useful only beside the other), else ""."""
        return self.component if self.inference_service and self.component in ROLES else ""

    @property
    def composite(self) -> str:
        """The InferenceService whose roles are one unit ("namespace/name"), or "" for none."""
        return f"{self.namespace}/{self.inference_service}" if self.disaggregated_role else ""

    @property
    def neutral(self) -> bool:
        """Not an accelerated OME component: class rules do not apply."""
        return not self.is_ome or self.component not in ACCELERATED_COMPONENTS


def _string_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def pod_identity(pod: dict[str, Any]) -> PodIdentity:
    meta = object_at(pod, "metadata")
    labels = _string_map(meta.get("labels"))
    annotations = _string_map(meta.get("annotations"))
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else ""
    return PodIdentity(
        namespace=namespace or "default",
        inference_service=labels.get(INFERENCE_SERVICE_LABEL, ""),
        component=labels.get(COMPONENT_LABEL, ""),
        runtime=labels.get(RUNTIME_LABEL, "") or annotations.get("ome.io/serving-runtime", ""),
        base_model=labels.get(BASE_MODEL_LABEL, "") or annotations.get("ome.io/base-model-name", ""),
        class_annotation=annotations.get(CLASS_ANNOTATION, ""),
    )


@dataclass(frozen=True, slots=True)
class ClassIntent:
    """The accelerator class and policy asked for, and where each came from."""

    accelerator_class: str  # "" when none is named
    # e.g. "engine.acceleratorOverride", "acceleratorSelector", "pod annotation"; with no class
    # named: the level whose `acceleratorClass: ""` masked the rest, else "".
    class_source: str
    policy: str
    policy_source: str

    @property
    def masked(self) -> bool:
        """A present-but-empty acceleratorClass named no class and hid the lower levels."""
        return not self.accelerator_class and bool(self.class_source)


def class_intent(identity: PodIdentity, isvc: dict[str, Any] | None, default_policy: str) -> ClassIntent:
    spec = object_at(isvc, "spec")
    component = object_at(spec, identity.component)
    override = object_at(component, "acceleratorOverride")
    selector = object_at(spec, "acceleratorSelector")
    isvc_meta = object_at(isvc, "metadata")
    isvc_annotation = _string_map(isvc_meta.get("annotations")).get(CLASS_ANNOTATION, "")

    spec_levels = (
        (override.get("acceleratorClass"), f"{identity.component}.acceleratorOverride"),
        (selector.get("acceleratorClass"), "InferenceService acceleratorSelector"),
    )
    annotations = (
        (identity.class_annotation, f"pod annotation {CLASS_ANNOTATION}"),
        (isvc_annotation, f"InferenceService annotation {CLASS_ANNOTATION}"),
    )
    # Spec levels: present wins, "" included (OME's first non-nil pointer). Annotations: only a name.
    name, source = next(
        ((n, s) for n, s in spec_levels if isinstance(n, str)),
        next(((n, s) for n, s in annotations if n), ("", "")),
    )
    policies = (
        (override.get("policy"), f"{identity.component}.acceleratorOverride"),
        (selector.get("policy"), "InferenceService acceleratorSelector"),
    )
    policy, policy_source = next(((p, s) for p, s in policies if isinstance(p, str) and p), (default_policy, "default"))
    return ClassIntent(name, source, policy, policy_source)
