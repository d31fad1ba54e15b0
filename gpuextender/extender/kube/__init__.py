"""The extender's connection to the Kubernetes API server, one home for it: the client
configuration (`connection.py`: in a pod, --kubeconfig, $KUBECONFIG), every raw call and how an
answer is read (`api_call.py`). The inventory's watches and writers build their calls on it; the
TokenReview client (ingest/token_review.py), the binder (scheduler/pod_binder.py) and explain's
reads (ui/explain_lookup.py) make theirs through it and import no Kubernetes client themselves."""
