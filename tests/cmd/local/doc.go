// Command local is the main job on an embedded default, with no cluster of the user's: it starts
// the rack box (package rackbox: a real control plane, kwok simulating one GB200 NVL72 rack, the
// real Dynamo operator), then previews and applies both stacks to it through the Automation API,
// each to Ready with its download Job and smoke test, printing each plan and the stack outputs, and
// stops everything. It prints the box's kubeconfig first, to watch placement with kubectl. RACKS=n
// makes the pool n racks, the first three partly used by another team's pods (addPool), so that
// each stack's placement decides something. With PORTAL=1 it then serves the portal's page on both stacks (PORTAL_ADDR,
// default 127.0.0.1:8080) until Ctrl-C.
package main
