//go:build tools

// Package tools names the command build.sh builds, so that go mod tidy keeps what it imports.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
