//go:build tools

// Keeps `go mod tidy` from dropping the control plane's requirement: the binaries are built from k8s.io/kubernetes's
// own main packages (tools/realengine/build.py).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubectl/pkg/cmd"
)
