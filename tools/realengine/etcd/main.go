// etcd's server is a library whose module has relative replace lines, so `go install` refuses it; its whole main
// is this one call.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
