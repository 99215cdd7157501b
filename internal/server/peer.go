package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
	"github.com/dataloaderd/dataloaderd/internal/files"
)

// errNoPeer: a call came on a connection whose peer's user is not known.
var errNoPeer = errkind.New(errkind.Unauthenticated, "the caller's user is not known: dataloaderd serves only unix sockets")

// peerCred is what the kernel says of the process at the other end of a
// unix socket connection (SO_PEERCRED), taken when it connected.
type peerCred struct {
	credentials.CommonAuthInfo
	uid, gid uint32
	pid      int32
	// groups are its supplementary groups (SO_PEERGROUPS).
	groups []uint32
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
	var groups []uint32
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		groups = peerGroups(int(fd))
	}); err != nil {
		return nil, nil, err
	}
	if credErr != nil {
		return nil, nil, fmt.Errorf("peer credentials: %w", credErr)
	}
	return conn, peerCred{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity},
		uid: cred.Uid, gid: cred.Gid, pid: cred.Pid, groups: groups}, nil
}

// maxGroups is the kernel's NGROUPS_MAX.
const maxGroups = 65536

// peerGroups are the supplementary groups of the process at the other end
// of unix socket fd, as they were when it connected (SO_PEERGROUPS, Linux
// 4.13). A kernel without it (or any failure) gives none: the peer's
// rights on files are then judged by its uid and primary gid alone, never
// more than it has.
func peerGroups(fd int) []uint32 {
	for n := 64; ; {
		buf := make([]uint32, n)
		size := uint32(4 * n)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case errno == 0:
			return buf[:size/4]
		case errno == unix.ERANGE && size/4 > uint32(n) && size/4 <= maxGroups:
			n = int(size / 4)
		default:
			return nil
		}
	}
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
	c, err := caller(ctx)
	return c.UID, err
}

// caller is the user, primary group and supplementary groups of the
// process that made the call in ctx: the rights files are read and
// written with on its behalf.
func caller(ctx context.Context) (files.Caller, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return files.Caller{}, errNoPeer
	}
	cred, ok := p.AuthInfo.(peerCred)
	if !ok {
		return files.Caller{}, errNoPeer
	}
	return files.Caller{UID: cred.uid, GID: cred.gid, Groups: cred.groups}, nil
}

// callerPID is the process that made the call in ctx, as the kernel gave
// it when the connection was made (0: not known, or in another pid
// namespace).
func callerPID(ctx context.Context) int32 {
	if p, ok := peer.FromContext(ctx); ok {
		if cred, ok := p.AuthInfo.(peerCred); ok {
			return cred.pid
		}
	}
	return 0
}
