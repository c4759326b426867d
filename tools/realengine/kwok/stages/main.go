// kwok-stages prints the node and pod Stages that kwok ships embedded (the ones kwokctl gives a cluster by default:
// nodes initialized and kept alive with leases, pods made ready, completed and deleted), as one YAML stream for
// `kwok --config`. Printed from the module we build, so no copy of kwok's files is kept in this repository.
package main

import (
	"fmt"
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodelease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	stages := []string{nodefast.DefaultNodeInit, nodelease.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady, podfast.DefaultPodComplete, podfast.DefaultPodDelete}
	for i, stage := range stages {
		if i > 0 {
			fmt.Println("---")
		}
		fmt.Println(strings.TrimSpace(stage))
	}
}
