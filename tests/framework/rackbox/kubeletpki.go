package rackbox

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// kubeletPKI is the trust between the API server and the box's kubelet endpoint, stricter than a
// kubeadm cluster's default (where the API server does not check the kubelets' self-signed serving
// certificates): a kubelet CA that signs the endpoint's serving certificate (for 127.0.0.1,
// checked by the API server through --kubelet-certificate-authority, as with kubelet
// serving-certificate bootstrap) and the API server's kubelet client certificate
// (--kubelet-client-certificate, which the endpoint requires at the handshake; a kubelet would
// answer 401 without it). Files under the box's folder, removed with it.
type kubeletPKI struct {
	caFile, clientCertFile, clientKeyFile string
	serving                               tls.Certificate
	pool                                  *x509.CertPool
}

// certAuthority signs the box's certificates.
type certAuthority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCertAuthority(name string) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(7 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &certAuthority{cert: cert, key: key}, nil
}

// issue signs a certificate for name with one extended key usage (and IP addresses, for a server).
func (ca *certAuthority) issue(serial int64, name string, usage x509.ExtKeyUsage, ips []net.IP) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
	}, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// servingCertificate is a kubelet serving certificate for the nodes' address, 127.0.0.1.
func (ca *certAuthority) servingCertificate() (tls.Certificate, error) {
	return ca.issue(2, "rackbox-kubelet", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
}

// clientCertificate is a client certificate, as the API server's kubelet client has.
func (ca *certAuthority) clientCertificate() (tls.Certificate, error) {
	return ca.issue(3, "kube-apiserver-kubelet-client", x509.ExtKeyUsageClientAuth, nil)
}

func newKubeletPKI(dir string) (*kubeletPKI, error) {
	ca, err := newCertAuthority("rackbox-kubelet-ca")
	if err != nil {
		return nil, err
	}
	serving, err := ca.servingCertificate()
	if err != nil {
		return nil, err
	}
	client, err := ca.clientCertificate()
	if err != nil {
		return nil, err
	}
	p := &kubeletPKI{
		caFile:         filepath.Join(dir, "kubelet-ca.crt"),
		clientCertFile: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		clientKeyFile:  filepath.Join(dir, "apiserver-kubelet-client.key"),
		serving:        serving,
		pool:           x509.NewCertPool(),
	}
	p.pool.AddCert(ca.cert)
	clientKeyDER, err := x509.MarshalECPrivateKey(client.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		return nil, err
	}
	for file, block := range map[string]*pem.Block{
		p.caFile:         {Type: "CERTIFICATE", Bytes: ca.cert.Raw},
		p.clientCertFile: {Type: "CERTIFICATE", Bytes: client.Certificate[0]},
		p.clientKeyFile:  {Type: "EC PRIVATE KEY", Bytes: clientKeyDER},
	} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}
