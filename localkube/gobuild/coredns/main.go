// Command coredns is CoreDNS with only the plugins the node tier's cluster DNS needs.
//
// Why a wrapper: the upstream command (github.com/coredns/coredns) links every plugin of its
// plugin.cfg, including the route53, azure, clouddns and forward plugins and their SDKs. The
// local plane serves cluster.local from the apiserver and must never forward a query off this
// machine (docs/real-node.md), so it links neither `forward` nor anything cloud-shaped.
// tests/k8s/build-binaries.sh copies this file into a throwaway module, requires
// github.com/coredns/coredns at its pinned COREDNS_VERSION and builds it.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, and nothing else (there is no `forward`: names outside the cluster's zones
	// are answered REFUSED by the server itself).
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives is the execution order of the plugins above, in upstream plugin.cfg's order.
var directives = []string{
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"kubernetes",
}

func init() {
	if err := dnsserver.SetDirectives(directives); err != nil {
		panic(err)
	}
}

func main() {
	coremain.Run()
}
