// k8s-validate checks Kubernetes manifests offline against the API's own Go
// types (k8s.io/api), strictly: an unknown or misspelt field, a wrong type
// or an unknown kind is an error, as the API server's strict field
// validation would say. kubeconform does the same from JSON schemas it
// downloads from GitHub; these types come through the Go module proxy.
//
//	k8s-validate FILE...   (multi-document YAML; - reads standard input)
//
// Prints one line per object ("apps/v1 DaemonSet monitoring/tlsrum") and
// exits 1 on the first error.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The kinds tlsrum's manifests may hold.
func object(apiVersion, kind string) (any, bool) {
	switch apiVersion + " " + kind {
	case "apps/v1 DaemonSet":
		return &appsv1.DaemonSet{}, true
	case "v1 Namespace":
		return &corev1.Namespace{}, true
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "v1 Service":
		return &corev1.Service{}, true
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, true
	case "rbac.authorization.k8s.io/v1 ClusterRole":
		return &rbacv1.ClusterRole{}, true
	case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}, true
	}
	return nil, false
}

func validate(name string, r io.Reader) (int, error) {
	docs := utilyaml.NewYAMLReader(bufio.NewReader(r))
	n := 0
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("%s: %w", name, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 || isComments(doc) {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return n, fmt.Errorf("%s: document %d: %w", name, n+1, err)
		}
		obj, ok := object(tm.APIVersion, tm.Kind)
		if !ok {
			return n, fmt.Errorf("%s: document %d: unknown kind %q %q", name, n+1, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return n, fmt.Errorf("%s: %s %s: %w", name, tm.APIVersion, tm.Kind, err)
		}
		meta := obj.(metav1.Object)
		if meta.GetName() == "" {
			return n, fmt.Errorf("%s: %s %s without metadata.name", name, tm.APIVersion, tm.Kind)
		}
		if err := check(obj); err != nil {
			return n, fmt.Errorf("%s: %s %s: %w", name, tm.Kind, meta.GetName(), err)
		}
		fmt.Printf("%s %s %s/%s\n", tm.APIVersion, tm.Kind, meta.GetNamespace(), meta.GetName())
		n++
	}
}

// What the API server would refuse beyond the field names and types.
func check(obj any) error {
	ds, ok := obj.(*appsv1.DaemonSet)
	if !ok {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || ds.Spec.Selector == nil || sel.Empty() {
		return fmt.Errorf("spec.selector missing or invalid: %v", err)
	}
	if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		return fmt.Errorf("spec.selector does not match the template's labels")
	}
	if len(ds.Spec.Template.Spec.Containers) == 0 {
		return fmt.Errorf("no containers")
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "" || c.Image == "" {
			return fmt.Errorf("container without name or image")
		}
		for _, p := range c.Ports {
			if p.ContainerPort < 1 || p.ContainerPort > 65535 {
				return fmt.Errorf("container %s: port %d", c.Name, p.ContainerPort)
			}
			if ds.Spec.Template.Spec.HostNetwork && p.HostPort != 0 && p.HostPort != p.ContainerPort {
				return fmt.Errorf("container %s: hostPort must equal containerPort with hostNetwork", c.Name)
			}
		}
	}
	return nil
}

func isComments(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: k8s-validate FILE... (- for standard input)")
		os.Exit(2)
	}
	total := 0
	for _, name := range os.Args[1:] {
		var r io.Reader = os.Stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				fmt.Fprintln(os.Stderr, "k8s-validate:", err)
				os.Exit(1)
			}
			defer f.Close()
			r = f
		}
		n, err := validate(name, r)
		total += n
		if err != nil {
			fmt.Fprintln(os.Stderr, "k8s-validate:", err)
			os.Exit(1)
		}
	}
	if total == 0 {
		fmt.Fprintln(os.Stderr, "k8s-validate: no objects")
		os.Exit(1)
	}
}
