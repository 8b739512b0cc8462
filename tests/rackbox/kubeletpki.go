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

func newKubeletPKI(dir string) (*kubeletPKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rackbox-kubelet-ca"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(7 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	issue := func(serial int64, name string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Minute), NotAfter: now.Add(7 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}, ca, &key.PublicKey, caKey)
		return der, key, err
	}
	servingDER, servingKey, err := issue(2, "rackbox-kubelet", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	clientDER, clientKey, err := issue(3, "kube-apiserver-kubelet-client", x509.ExtKeyUsageClientAuth, nil)
	if err != nil {
		return nil, err
	}
	p := &kubeletPKI{
		caFile:         filepath.Join(dir, "kubelet-ca.crt"),
		clientCertFile: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		clientKeyFile:  filepath.Join(dir, "apiserver-kubelet-client.key"),
		serving:        tls.Certificate{Certificate: [][]byte{servingDER}, PrivateKey: servingKey},
		pool:           x509.NewCertPool(),
	}
	p.pool.AddCert(ca)
	clientKeyDER, err := x509.MarshalECPrivateKey(clientKey)
	if err != nil {
		return nil, err
	}
	for file, block := range map[string]*pem.Block{
		p.caFile:         {Type: "CERTIFICATE", Bytes: caDER},
		p.clientCertFile: {Type: "CERTIFICATE", Bytes: clientDER},
		p.clientKeyFile:  {Type: "EC PRIVATE KEY", Bytes: clientKeyDER},
	} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}
