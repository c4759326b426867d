// The Kubernetes provider's own main, which cannot be built as published: it embeds two files that upstream
// generates with `go generate` and does not ship in the module. tools/realengine/build.py writes them from the
// module's committed schema.json and terraform-mapping.json before it builds this package.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var schema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() { provider.Serve("kubernetes", version.Version, schema, terraformMapping) }
