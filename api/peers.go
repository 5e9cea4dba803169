package api

import (
	"context"
	"crypto/tls"
	"net/http"

	"connectrpc.com/connect"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
	"github.com/fencelock/fencelock/server"
)

// Peers returns the client of other nodes' APIs a node needs
// (server.Config.Peers): HTTPS with tlsConfig when set, else HTTP/2 or
// HTTP/1.1 without TLS. adminToken, if set, goes with AddMember, as the
// cluster's admin token.
func Peers(tlsConfig *tls.Config, adminToken string) server.Peers {
	p := &peers{hc: http.DefaultClient, scheme: "http://", token: adminToken}
	if tlsConfig != nil {
		p.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}}
		p.scheme = "https://"
	}
	return p
}

type peers struct {
	hc     *http.Client
	scheme string
	token  string
}

func (p *peers) client(api string) fencelockv1connect.ClusterServiceClient {
	return fencelockv1connect.NewClusterServiceClient(p.hc, p.scheme+api)
}

func (p *peers) Status(ctx context.Context, api string) (fencelock.NodeStatus, error) {
	resp, err := p.client(api).Status(ctx, connect.NewRequest(&fencelockv1.StatusRequest{}))
	if err != nil {
		return fencelock.NodeStatus{}, wire.FromConnect(err)
	}
	return wire.StatusOf(resp.Msg), nil
}

func (p *peers) AddMember(ctx context.Context, api string, m fencelock.Member) error {
	req := connect.NewRequest(&fencelockv1.AddMemberRequest{Id: m.ID, RaftAddr: m.RaftAddr, ApiAddr: m.APIAddr})
	_, err := p.client(api).AddMember(ctx, wire.WithAdminToken(req, p.token))
	return wire.FromConnect(err)
}
