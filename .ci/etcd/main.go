// An etcd server for the engine tier's control plane (.ci/kube builds it; it is ours, a few lines
// over etcd's own embed package): one member on loopback, its data in a
// folder, as kube-apiserver needs it. Started by tests/support/harness/engine/control_plane.py.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "the member's data folder")
	client := flag.String("listen-client-url", "http://127.0.0.1:2379", "the client URL")
	peer := flag.String("listen-peer-url", "http://127.0.0.1:2380", "the peer URL")
	flag.Parse()
	cfg := embed.NewConfig()
	cfg.Dir = *dataDir
	cfg.LogLevel = "error"
	clientURL, err := url.Parse(*client)
	if err != nil {
		log.Fatal(err)
	}
	peerURL, err := url.Parse(*peer)
	if err != nil {
		log.Fatal(err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*clientURL}, []url.URL{*clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peerURL}, []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	server, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer server.Close()
	<-server.Server.ReadyNotify()
	os.Stdout.WriteString("ready\n")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-stop:
	case err := <-server.Err():
		log.Fatal(err)
	}
}
