{{- /*
The chart renders deploy/'s own kustomizations: the files `kubectl apply -k deploy/` reads are the
files this chart reads (.Files), so the two installs never drift (tests/deploy/test_chart.py holds
their objects equal for every documented choice). This is the part of kustomize those files use:
resources (files and directories), configMapGenerator (files), components, patches (RFC 6902 JSON
patches, inline or in a file, with a target by kind, name, namespace or label selector), labels,
images and ImageTagTransformer transformers; anything else fails the render, saying what.

Every template here works on an accumulator, a dict {objects: [...], generated: [...]}, changed in
place (Go templates return only text).
*/ -}}

{{- /* kz.build: render the kustomization (or Component) of directory .dir onto .acc. */ -}}
{{- define "kz.build" -}}
{{- $k := .files.Get (printf "%s/kustomization.yaml" .dir) | fromYaml -}}
{{- if or (not $k) (hasKey $k "Error") -}}
{{- fail (printf "%s/kustomization.yaml: not found or not YAML" .dir) -}}
{{- end -}}
{{- include "kz.apply" (dict "files" .files "dir" .dir "acc" .acc "k" $k) -}}
{{- end -}}

{{- /* kz.apply: the parsed kustomization .k, of directory .dir, onto .acc. */ -}}
{{- define "kz.apply" -}}
{{- $files := .files -}}{{- $dir := .dir -}}{{- $acc := .acc -}}{{- $k := .k -}}
{{- range $key, $_ := $k -}}
{{- if not (has $key (list "apiVersion" "kind" "resources" "components" "configMapGenerator" "patches" "labels" "images" "transformers")) -}}
{{- fail (printf "%s/kustomization.yaml: %s is not a field this chart applies (deploy/templates/_kustomize.tpl)" $dir $key) -}}
{{- end -}}
{{- end -}}
{{- /* A Kustomization's transformers apply to what it accumulates, never to its parent's: it
       renders into an accumulator of its own. A Component works on its parent's. */ -}}
{{- $own := $acc -}}
{{- if ne (default "Kustomization" $k.kind) "Component" -}}
{{- $own = dict "objects" (list) "generated" (list) -}}
{{- end -}}
{{- range $k.resources -}}
{{- $path := clean (printf "%s/%s" $dir .) -}}
{{- if $files.Get (printf "%s/kustomization.yaml" $path) -}}
{{- $sub := dict "objects" (list) "generated" (list) -}}
{{- include "kz.build" (dict "files" $files "dir" $path "acc" $sub) -}}
{{- $_ := set $own "objects" (concat $own.objects $sub.objects) -}}
{{- $_ := set $own "generated" (concat $own.generated $sub.generated) -}}
{{- else -}}
{{- $text := $files.Get $path -}}
{{- if not $text -}}{{- fail (printf "%s/kustomization.yaml: resource %s not found" $dir .) -}}{{- end -}}
{{- range regexSplit "(?m)^---[ \t]*$" $text -1 -}}
{{- $doc := fromYaml . -}}
{{- if hasKey $doc "Error" -}}{{- fail (printf "%s: %s" $path $doc.Error) -}}{{- end -}}
{{- if $doc -}}{{- $_ := set $own "objects" (append $own.objects $doc) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $k.configMapGenerator -}}
{{- $data := dict -}}
{{- range .files -}}
{{- $parts := splitList "=" . -}}
{{- $key := base (first $parts) -}}{{- $file := last $parts -}}
{{- $text := $files.Get (clean (printf "%s/%s" $dir $file)) -}}
{{- if not $text -}}{{- fail (printf "%s/kustomization.yaml: configMapGenerator file %s not found" $dir $file) -}}{{- end -}}
{{- $_ := set $data $key $text -}}
{{- end -}}
{{- $meta := dict "name" .name -}}
{{- if .namespace -}}{{- $_ := set $meta "namespace" .namespace -}}{{- end -}}
{{- $cm := dict "apiVersion" "v1" "kind" "ConfigMap" "metadata" $meta "data" $data -}}
{{- $_ := set $own "objects" (append $own.objects $cm) -}}
{{- $_ := set $own "generated" (append $own.generated $cm) -}}
{{- end -}}
{{- range $k.components -}}
{{- include "kz.build" (dict "files" $files "dir" (clean (printf "%s/%s" $dir .)) "acc" $own) -}}
{{- end -}}
{{- range $k.patches -}}
{{- $ops := list -}}
{{- if .patch -}}{{- $ops = fromYamlArray .patch -}}
{{- else -}}{{- $ops = $files.Get (clean (printf "%s/%s" $dir .path)) | fromYamlArray -}}{{- end -}}
{{- if not .target -}}{{- fail (printf "%s/kustomization.yaml: a patch without a target (only JSON patches are applied)" $dir) -}}{{- end -}}
{{- $target := .target -}}
{{- range $own.objects -}}
{{- if eq (include "kz.matches" (dict "o" . "target" $target)) "true" -}}
{{- include "kz.patch" (dict "o" . "ops" $ops "where" $dir) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $k.labels -}}
{{- include "kz.labels" (dict "objects" $own.objects "pairs" .pairs "templates" (default false .includeTemplates)) -}}
{{- end -}}
{{- range $k.images -}}
{{- include "kz.image" (dict "objects" $own.objects "name" .name "newName" (default "" .newName) "newTag" (toString (default "" .newTag))) -}}
{{- end -}}
{{- range $k.transformers -}}
{{- $t := $files.Get (clean (printf "%s/%s" $dir .)) | fromYaml -}}
{{- if ne $t.kind "ImageTagTransformer" -}}{{- fail (printf "%s/%s: only ImageTagTransformer is applied" $dir .) -}}{{- end -}}
{{- $it := $t.imageTag -}}
{{- include "kz.image" (dict "objects" $own.objects "name" $it.name "newName" (default "" $it.newName) "newTag" (toString (default "" $it.newTag))) -}}
{{- end -}}
{{- if ne (default "Kustomization" $k.kind) "Component" -}}
{{- $_ := set $acc "objects" (concat $acc.objects $own.objects) -}}
{{- $_ := set $acc "generated" (concat $acc.generated $own.generated) -}}
{{- end -}}
{{- end -}}

{{- /* kz.matches: "true" when object .o is what .target selects (kind, name, namespace, labelSelector). */ -}}
{{- define "kz.matches" -}}
{{- $o := .o -}}{{- $t := .target -}}{{- $ok := true -}}
{{- if and $t.kind (ne $t.kind $o.kind) -}}{{- $ok = false -}}{{- end -}}
{{- if and $t.name (ne $t.name $o.metadata.name) -}}{{- $ok = false -}}{{- end -}}
{{- if and $t.namespace (ne $t.namespace (default "" $o.metadata.namespace)) -}}{{- $ok = false -}}{{- end -}}
{{- if $t.labelSelector -}}
{{- range splitList "," $t.labelSelector -}}
{{- $kv := splitList "=" . -}}
{{- if ne (index (default dict $o.metadata.labels) (first $kv) | default "") (last $kv) -}}{{- $ok = false -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $ok -}}
{{- end -}}

{{- /* kz.patch: the RFC 6902 operations .ops (add, replace, remove, test) on object .o, in place. */ -}}
{{- define "kz.patch" -}}
{{- $o := .o -}}{{- $where := .where -}}
{{- range .ops -}}
{{- $op := . -}}
{{- $keys := list -}}
{{- range rest (splitList "/" $op.path) -}}{{- $keys = append $keys (replace "~0" "~" (replace "~1" "/" .)) -}}{{- end -}}
{{- /* Walk to the parent of the last key; a list's parent is kept to replace the list whole. */ -}}
{{- $node := $o -}}{{- $holder := dict -}}{{- $holderKey := "" -}}
{{- range initial $keys -}}
{{- if kindIs "map" $node -}}
{{- if not (hasKey $node .) -}}{{- fail (printf "%s: %s %s: no %s" $where $op.op $op.path .) -}}{{- end -}}
{{- $holder = $node -}}{{- $holderKey = . -}}{{- $node = index $node . -}}
{{- else -}}
{{- $node = index $node (atoi .) -}}{{- $holder = dict -}}{{- $holderKey = "" -}}
{{- end -}}
{{- end -}}
{{- $last := last $keys -}}
{{- if kindIs "map" $node -}}
{{- if eq $op.op "test" -}}
{{- if ne (toJson (index $node $last)) (toJson $op.value) -}}{{- fail (printf "%s: test %s: %s is not %s" $where $op.path (toJson (index $node $last)) (toJson $op.value)) -}}{{- end -}}
{{- else if eq $op.op "remove" -}}{{- $_ := unset $node $last -}}
{{- else if or (eq $op.op "add") (eq $op.op "replace") -}}
{{- if and (eq $op.op "replace") (not (hasKey $node $last)) -}}{{- fail (printf "%s: replace %s: no such member" $where $op.path) -}}{{- end -}}
{{- $_ := set $node $last $op.value -}}
{{- else -}}{{- fail (printf "%s: op %s is not applied" $where $op.op) -}}{{- end -}}
{{- else -}}
{{- if not $holderKey -}}{{- fail (printf "%s: %s %s: a list in a list" $where $op.op $op.path) -}}{{- end -}}
{{- $n := len $node -}}
{{- $at := $n -}}{{- if ne $last "-" -}}{{- $at = atoi $last -}}{{- end -}}
{{- if eq $op.op "test" -}}
{{- if ne (toJson (index $node $at)) (toJson $op.value) -}}{{- fail (printf "%s: test %s: %s is not %s" $where $op.path (toJson (index $node $at)) (toJson $op.value)) -}}{{- end -}}
{{- else -}}
{{- $out := list -}}
{{- range $i, $e := $node -}}
{{- if and (eq $i $at) (eq $op.op "add") -}}{{- $out = append $out $op.value -}}{{- end -}}
{{- if eq $i $at -}}
{{- if eq $op.op "replace" -}}{{- $out = append $out $op.value -}}{{- else if eq $op.op "add" -}}{{- $out = append $out $e -}}{{- end -}}
{{- else -}}{{- $out = append $out $e -}}{{- end -}}
{{- end -}}
{{- if and (eq $at $n) (eq $op.op "add") -}}{{- $out = append $out $op.value -}}{{- end -}}
{{- if and (ge $at $n) (ne $op.op "add") -}}{{- fail (printf "%s: %s %s: index out of range" $where $op.op $op.path) -}}{{- end -}}
{{- $_ := set $holder $holderKey $out -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* kz.labels: .pairs on every object's metadata (and pod templates' with .templates). */ -}}
{{- define "kz.labels" -}}
{{- $pairs := .pairs -}}{{- $templates := .templates -}}
{{- range .objects -}}
{{- $meta := .metadata -}}
{{- $_ := set $meta "labels" (merge (dict) $pairs (default dict $meta.labels)) -}}
{{- if and $templates .spec (kindIs "map" .spec) (hasKey .spec "template") -}}
{{- $tmeta := default dict .spec.template.metadata -}}
{{- $_ := set $tmeta "labels" (merge (dict) $pairs (default dict $tmeta.labels)) -}}
{{- $_ := set .spec.template "metadata" $tmeta -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* kz.image: containers whose image is .name (any tag) get .newName and/or .newTag. */ -}}
{{- define "kz.image" -}}
{{- $name := .name -}}{{- $newName := .newName -}}{{- $newTag := .newTag -}}
{{- range .objects -}}
{{- if and .spec (kindIs "map" .spec) .spec.template -}}
{{- range .spec.template.spec.containers -}}
{{- $image := .image -}}
{{- $repo := regexReplaceAll ":[^:/]+$" $image "" -}}
{{- if eq $repo $name -}}
{{- $tag := regexFind ":[^:/]+$" $image | trimPrefix ":" -}}
{{- $_ := set . "image" (printf "%s:%s" (default $repo $newName) (default $tag $newTag)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
