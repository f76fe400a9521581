package login

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// execAPIVersion is the ExecCredential version the contexts ask for, and
// the one `tether credential` answers in.
const execAPIVersion = "client.authentication.k8s.io/v1"

// Entries are what login writes for one hub.
type Entries struct {
	Hub      string // the hub's URL, as the person gave it
	Names    Names
	Clusters []string // the names the hub gives them
	CA       []byte   // PEM, for certificate-authority-data; none trusts the system's roots
	Command  string   // the tether binary kubectl runs
}

// KubeconfigPath is the file login writes: the first of $KUBECONFIG's
// list, as kubectl writes to it, or ~/.kube/config.
func KubeconfigPath() string {
	if list := filepath.SplitList(os.Getenv(clientcmd.RecommendedConfigPathEnvVar)); len(list) > 0 && list[0] != "" {
		return list[0]
	}
	return clientcmd.RecommendedHomeFile
}

// Merge writes e into the kubeconfig at path, creating it if missing. The
// hub's earlier entries (its user, and the contexts and clusters its
// prefix names) are replaced; every other entry is kept as it was. The
// current context is set only where there was none, or it named one of the
// hub's contexts that is gone. It holds kubectl's lock on the file while
// it reads and writes it.
func Merge(path string, e Entries) error {
	unlock, err := lockKubeconfig(path)
	if err != nil {
		return err
	}
	defer unlock()
	cfg, err := loadKubeconfig(path)
	if err != nil {
		return err
	}
	user := e.Names.User()
	for name, c := range cfg.Contexts {
		if e.Names.Owns(name) && c.AuthInfo == user {
			delete(cfg.Contexts, name)
		}
	}
	for name := range cfg.Clusters {
		if e.Names.Owns(name) && !inUse(cfg, name) {
			delete(cfg.Clusters, name)
		}
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion: execAPIVersion,
		Command:    e.Command,
		Args:       []string{"credential", "--hub", e.Hub},
		// Only a browser sign-in needs the terminal; kubectl run without
		// one (in a script) gets an error instead of a prompt.
		InteractiveMode:    clientcmdapi.IfAvailableExecInteractiveMode,
		ProvideClusterInfo: false,
		InstallHint:        "tether credential signs you in to a Tether hub: install tether (https://github.com/tetherhq/tether) and run tether login --hub " + e.Hub,
	}}
	base := e.Hub
	for len(base) > 0 && base[len(base)-1] == '/' {
		base = base[:len(base)-1]
	}
	for _, name := range e.Clusters {
		n := e.Names.Context(name)
		cfg.Clusters[n] = &clientcmdapi.Cluster{Server: base + "/clusters/" + name, CertificateAuthorityData: e.CA}
		cfg.Contexts[n] = &clientcmdapi.Context{Cluster: n, AuthInfo: user}
	}
	if _, ok := cfg.Contexts[cfg.CurrentContext]; !ok {
		cfg.CurrentContext = ""
		if len(e.Clusters) > 0 {
			cfg.CurrentContext = e.Names.Context(e.Clusters[0])
		}
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// lockKubeconfig takes the lock kubectl takes to change a kubeconfig
// (client-go's clientcmd.ModifyConfig: the file path.lock, created only if
// there is none), so that a kubectl changing the file at the same time,
// say `kubectl config use-context`, neither loses what login wrote nor has
// its own change lost.
func lockKubeconfig(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	lock := path + ".lock"
	f, err := os.OpenFile(lock, os.O_CREATE|os.O_EXCL, 0)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("another program is changing the kubeconfig %s: %s is there (remove it if nothing is)", path, lock)
	}
	if err != nil {
		return nil, fmt.Errorf("lock kubeconfig: %w", err)
	}
	f.Close()
	return func() { os.Remove(lock) }, nil
}

// loadKubeconfig reads path, or makes an empty kubeconfig if there is none.
func loadKubeconfig(path string) (*clientcmdapi.Config, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return clientcmdapi.NewConfig(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig: %w", err)
	}
	return cfg, nil
}

// inUse says whether a context kept from before names cluster.
func inUse(cfg *clientcmdapi.Config, cluster string) bool {
	for _, c := range cfg.Contexts {
		if c.Cluster == cluster {
			return true
		}
	}
	return false
}
