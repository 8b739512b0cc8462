package rackbox

import "crypto/tls"

// Hooks for the package's own tests (box_test.go), compiled only with them.

// ServeForeignCertificate makes every node's kubelet endpoint present a serving certificate for
// 127.0.0.1 that a CA the API server does not trust signed, until restore is called.
func (b *Box) ServeForeignCertificate() (restore func(), err error) {
	ca, err := newCertAuthority("not-the-kubelet-ca")
	if err != nil {
		return nil, err
	}
	cert, err := ca.servingCertificate()
	if err != nil {
		return nil, err
	}
	old := b.kubelet.serving.Swap(&cert)
	return func() { b.kubelet.serving.Store(old) }, nil
}

// KubeletClientTLS is a client's TLS configuration for calling the kubelet endpoint directly: it
// checks the endpoint against the kubelet CA and presents the API server's kubelet client
// certificate (apiServers) or a client certificate another CA signed.
func (b *Box) KubeletClientTLS(apiServers bool) (*tls.Config, error) {
	cfg := &tls.Config{RootCAs: b.kubelet.pki.pool, MinVersion: tls.VersionTLS12}
	var cert tls.Certificate
	var err error
	if apiServers {
		cert, err = tls.LoadX509KeyPair(b.kubelet.pki.clientCertFile, b.kubelet.pki.clientKeyFile)
	} else {
		var ca *certAuthority
		if ca, err = newCertAuthority("not-the-kubelet-ca"); err == nil {
			cert, err = ca.clientCertificate()
		}
	}
	if err != nil {
		return nil, err
	}
	cfg.Certificates = []tls.Certificate{cert}
	return cfg, nil
}

// ExecConnections is the number of exec connections the kubelet endpoint holds.
func (b *Box) ExecConnections() int {
	b.kubelet.mu.Lock()
	defer b.kubelet.mu.Unlock()
	return len(b.kubelet.conns)
}
