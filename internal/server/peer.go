package server

import (
	"context"
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// errNoPeer: a call came on a connection whose peer's user is not known.
var errNoPeer = errors.New("the caller's user is not known: dataloaderd serves only unix sockets")

// peerCred is what the kernel says of the process at the other end of a
// unix socket connection (SO_PEERCRED), taken when it connected.
type peerCred struct {
	credentials.CommonAuthInfo
	uid, gid uint32
	pid      int32
}

func (peerCred) AuthType() string { return "unix-peercred" }

// unixPeers are transport credentials that read each connection's peer
// credentials and do no handshake: clients connect as with insecure
// credentials. They give every call the user the daemon holds its
// sessions under.
type unixPeers struct{}

func (unixPeers) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return conn, nil, nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, nil, err
	}
	if credErr != nil {
		return nil, nil, fmt.Errorf("peer credentials: %w", credErr)
	}
	return conn, peerCred{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity},
		uid: cred.Uid, gid: cred.Gid, pid: cred.Pid}, nil
}

func (unixPeers) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, nil, errors.New("unixPeers is for the server side")
}

func (unixPeers) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "unix-peercred"}
}

func (u unixPeers) Clone() credentials.TransportCredentials { return u }

func (unixPeers) OverrideServerName(string) error { return nil }

// callerUID is the user of the process that made the call in ctx.
func callerUID(ctx context.Context) (uint32, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return 0, errNoPeer
	}
	cred, ok := p.AuthInfo.(peerCred)
	if !ok {
		return 0, errNoPeer
	}
	return cred.uid, nil
}
