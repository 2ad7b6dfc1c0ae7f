// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3/etcdmain), as the etcd binary of its release runs it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
