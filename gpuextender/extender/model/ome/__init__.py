"""OME (sgl-project/ome) semantics: pure functions over OME's custom resources."""
