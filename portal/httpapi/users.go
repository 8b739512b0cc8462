package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// A User signs in to the portal with a token of their own and may reach only the stacks and
// namespaces granted to them. The portal holds each token's SHA-256, never the token.
type User struct {
	// Name is who the audit log says acted: letters, digits and . _ @ - (an e-mail address will do).
	Name string `yaml:"name"`
	// TokenSHA256 is the hex SHA-256 of the user's token (printf %s "$TOKEN" | sha256sum). A user
	// without one signs in only through the site's proxy (Server.Proxy), by name.
	TokenSHA256 string `yaml:"tokenSHA256"`
	// Stacks are the stacks the user may see and act on, as patterns ("team-a-*"; "*" is every stack).
	Stacks []string `yaml:"stacks"`
	// Namespaces are the namespaces the user's previews and ups may deploy into (namespace.name), as
	// patterns; none: the user may read, refresh and destroy their stacks but not deploy.
	Namespaces []string `yaml:"namespaces"`
	// Hostnames are the hostnames the user's stacks may route on the site's Gateways
	// (exposure.hostname), as patterns ("*.team-a.example.com"); none: the user's requests may not
	// turn exposure on. A hostname on a shared Gateway is the site's to hand out, as a namespace is.
	Hostnames []string `yaml:"hostnames"`
	// Groups are the user's groups at the Kubernetes API server (their team: "team-a"), which the
	// portal impersonates with the user's name when it runs with -impersonate: the site's
	// RoleBindings grant a team's group its namespaces.
	Groups []string `yaml:"groups"`

	hash    [sha256.Size]byte
	noToken bool
}

// MayReach says whether the user may see and act on stack.
func (u *User) MayReach(stack string) bool { return matchAny(u.Stacks, stack) }

// MayDeployTo says whether the user's requests may deploy into namespace ns.
func (u *User) MayDeployTo(ns string) bool { return matchAny(u.Namespaces, ns) }

// MayRoute says whether the user's requests may route hostname on the site's Gateways: a pattern
// of theirs is the hostname itself, *.<domain> with the hostname under that domain (one or more
// labels before it, as a Gateway API wildcard), or *.
func (u *User) MayRoute(hostname string) bool {
	for _, p := range u.Hostnames {
		if p == "*" || p == hostname {
			return true
		}
		if domain, ok := strings.CutPrefix(p, "*"); ok && strings.HasSuffix(hostname, domain) && len(hostname) > len(domain) {
			return true
		}
	}
	return false
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// Users are the portal's users, each found by their token.
type Users struct{ list []*User }

// SingleUser is one user who holds token and may reach every stack and namespace: the portal's
// shared token (MINIMAX_M3_PORTAL_TOKEN), for a portal one trust domain uses.
func SingleUser(name, token string) (*Users, error) {
	if len(token) < 16 {
		return nil, errors.New("the bearer token must have at least 16 characters")
	}
	u := &User{Name: name, Stacks: []string{"*"}, Namespaces: []string{"*"}, Hostnames: []string{"*"}, hash: sha256.Sum256([]byte(token))}
	u.TokenSHA256 = hex.EncodeToString(u.hash[:])
	return &Users{list: []*User{u}}, nil
}

// LoadUsers reads a users file (see ParseUsers).
func LoadUsers(file string) (*Users, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	us, err := ParseUsers(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return us, nil
}

// ParseUsers reads the users of a YAML document:
//
//	users:
//	  - name: alice@team-a
//	    tokenSHA256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
//	    stacks: ["team-a-*"]
//	    namespaces: ["team-a"]
//	    hostnames: ["*.team-a.example.com"]
//
// An unknown key, a name or token used twice, a hash that is not 64 hex digits, a bad pattern or a
// user with no stack is an error naming its key (users[1].tokenSHA256).
func ParseUsers(data []byte) (*Users, error) {
	var doc struct {
		Users []*User `yaml:"users"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(doc.Users) == 0 {
		return nil, errors.New("users: no user")
	}
	names, hashes := map[string]string{}, map[[sha256.Size]byte]string{}
	var problems []string
	for i, u := range doc.Users {
		at := fmt.Sprintf("users[%d]", i)
		if u == nil {
			problems = append(problems, at+": empty")
			continue
		}
		if !userName.MatchString(u.Name) {
			problems = append(problems, fmt.Sprintf("%s.name: %q is not a user name (letters, digits, . _ @ -)", at, u.Name))
		} else if first, dup := names[u.Name]; dup {
			problems = append(problems, fmt.Sprintf("%s.name: %q is %s's too", at, u.Name, first))
		} else {
			names[u.Name] = at
		}
		b, err := hex.DecodeString(strings.ToLower(u.TokenSHA256))
		switch {
		case u.TokenSHA256 == "":
			u.noToken = true
		case err != nil || len(b) != sha256.Size:
			problems = append(problems, at+".tokenSHA256: 64 hex digits, the SHA-256 of the user's token (printf %s \"$TOKEN\" | sha256sum)")
		default:
			copy(u.hash[:], b)
			if first, dup := hashes[u.hash]; dup {
				problems = append(problems, fmt.Sprintf("%s.tokenSHA256: the token of %s too; each user signs in with a token of their own", at, first))
			}
			hashes[u.hash] = at
		}
		if len(u.Stacks) == 0 {
			problems = append(problems, at+`.stacks: no stack: name the stacks the user may reach ("team-a-*"; "*" is every stack)`)
		}
		for _, f := range []struct {
			key      string
			patterns []string
		}{{"stacks", u.Stacks}, {"namespaces", u.Namespaces}} {
			for j, p := range f.patterns {
				if _, err := path.Match(p, ""); err != nil || p == "" {
					problems = append(problems, fmt.Sprintf("%s.%s[%d]: %q is not a pattern (letters, digits, -, *, ?, [a-z])", at, f.key, j, p))
				}
			}
		}
		for j, g := range u.Groups {
			if g == "" || strings.HasPrefix(g, "system:") {
				problems = append(problems, fmt.Sprintf("%s.groups[%d]: %q is not a team's group (the system: groups are Kubernetes' own)", at, j, g))
			}
		}
		for j, p := range u.Hostnames {
			if p != "*" && !hostnamePattern.MatchString(p) {
				problems = append(problems, fmt.Sprintf("%s.hostnames[%d]: %q is not a hostname pattern: a lower-case hostname (m3.team-a.example.com), *.<domain> (every name under it: *.team-a.example.com) or * (any)", at, j, p))
			}
		}
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return &Users{list: doc.Users}, nil
}

var userName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$`)

// hostnamePattern is a lower-case DNS name, optionally with a leading "*." (a wildcard only as the
// whole leftmost label: inside a label it would reach into other teams' domains).
var hostnamePattern = regexp.MustCompile(`^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$`)

// byToken is the user whose token t is, or nil. Every user's hash is compared, in constant time.
func (us *Users) byToken(t string) *User {
	if t == "" {
		return nil
	}
	h := sha256.Sum256([]byte(t))
	var found *User
	for _, u := range us.list {
		if subtle.ConstantTimeCompare(h[:], u.hash[:]) == 1 && !u.noToken {
			found = u
		}
	}
	return found
}

// byName is the user called name, or nil.
func (us *Users) byName(name string) *User {
	for _, u := range us.list {
		if u.Name == name {
			return u
		}
	}
	return nil
}

// ProxyIdentity takes who a request is from the site's authenticating reverse proxy (oauth2-proxy,
// an ingress with OIDC): a request whose connection comes from one of From carries the signed-in
// user's name in Header, which must name a user of the users file. Any other request signs in with
// a token as usual, and its Header is ignored: a client cannot claim a name by sending it.
type ProxyIdentity struct {
	Header string
	From   []netip.Prefix
}

// ParseTrustedProxies reads the proxy's addresses: each an address (10.0.0.5) or a CIDR
// (10.0.0.0/29); an IPv4-mapped IPv6 one is its IPv4 form (connections are compared so), and one
// that matches every address (0.0.0.0/0, ::/0) is refused.
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	if len(list) == 0 {
		return nil, errors.New("no address: name the proxy's")
	}
	var out []netip.Prefix
	for _, a := range list {
		pre, err := netip.ParsePrefix(a)
		if err != nil {
			addr, aerr := netip.ParseAddr(a)
			if aerr != nil {
				return nil, fmt.Errorf("%q is neither an address nor a CIDR", a)
			}
			pre = netip.PrefixFrom(addr, addr.BitLen())
		}
		if pre.Addr().Is4In6() {
			pre = netip.PrefixFrom(pre.Addr().Unmap(), max(0, pre.Bits()-96))
		}
		if pre = pre.Masked(); pre.Bits() == 0 {
			return nil, fmt.Errorf("%q trusts every address: name the proxy's", a)
		}
		out = append(out, pre)
	}
	return out, nil
}

// trusts says whether the request's connection comes from the proxy.
func (p *ProxyIdentity) trusts(remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	for _, pre := range p.From {
		if pre.Contains(ap.Addr().Unmap()) {
			return true
		}
	}
	return false
}

type userKey struct{}

// userOf is the signed-in user of a request that passed auth.
func userOf(ctx context.Context) *User {
	u, _ := ctx.Value(userKey{}).(*User)
	return u
}
