module github.com/tetherhq/tether/bench/wschoice

go 1.26

require (
	github.com/coder/websocket v1.8.15
	github.com/gorilla/websocket v1.5.3
	github.com/hashicorp/yamux v0.1.2
)
