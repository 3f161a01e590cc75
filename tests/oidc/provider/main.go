// qf-oidc-provider: the OpenID provider that tests/oidc signs in against. It is zitadel/oidc's
// OpenID provider (pkg/op, a certified implementation) with its example login page and in-memory
// storage, wrapped so that a test can configure what a real identity provider is configured
// with and the example hard-codes:
//
//   - clients from a JSON file (public or confidential, redirect globs, post-logout redirects),
//     each issuing JWT access tokens (audience: the client id), as Keycloak, Okta and Entra do;
//   - users from the same file, each with extra claims (tenant, roles, groups) that go into the
//     ID token, the access token and the userinfo answer;
//   - the access token's and ID token's lifetimes;
//   - the signing keys: RS256 or ES256, rotated on request (POST /test/rotate), the previous
//     keys kept in the JWKS unless the rotation retires them.
//
// Usage: qf-oidc-provider CONFIG.json. It listens on 127.0.0.1:<port> and prints one line,
// "listening <issuer>", once it accepts connections.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/uuid"
	"golang.org/x/text/language"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

type clientConfig struct {
	ID                 string   `json:"id"`
	Secret             string   `json:"secret"` // empty: a public client (PKCE, no secret)
	RedirectGlobs      []string `json:"redirect_uris"`
	PostLogoutRedirect []string `json:"post_logout_redirect_uris"`
}

type userConfig struct {
	ID       string         `json:"id"`
	Username string         `json:"username"`
	Password string         `json:"password"`
	First    string         `json:"first_name"`
	Last     string         `json:"last_name"`
	Email    string         `json:"email"`
	Claims   map[string]any `json:"claims"`
}

type config struct {
	Port               int            `json:"port"`
	Algorithm          string         `json:"algorithm"` // RS256 (default) or ES256
	AccessTokenSeconds int            `json:"access_token_seconds"`
	IDTokenSeconds     int            `json:"id_token_seconds"`
	Clients            []clientConfig `json:"clients"`
	Users              []userConfig   `json:"users"`
}

// --- users -------------------------------------------------------------------------------------

type users struct {
	byID       map[string]*storage.User
	byUsername map[string]*storage.User
	claims     map[string]map[string]any
}

func newUsers(list []userConfig) *users {
	u := &users{map[string]*storage.User{}, map[string]*storage.User{}, map[string]map[string]any{}}
	for _, c := range list {
		user := &storage.User{
			ID: c.ID, Username: c.Username, Password: c.Password, FirstName: c.First, LastName: c.Last,
			Email: c.Email, EmailVerified: true, PreferredLanguage: language.English,
		}
		u.byID[c.ID] = user
		u.byUsername[c.Username] = user
		u.claims[c.ID] = c.Claims
	}
	return u
}

func (u *users) GetUserByID(id string) *storage.User         { return u.byID[id] }
func (u *users) GetUserByUsername(name string) *storage.User { return u.byUsername[name] }
func (u *users) ExampleClientID() string                     { return "service" }

// --- clients -----------------------------------------------------------------------------------

type client struct {
	cfg     clientConfig
	idToken time.Duration
}

func (c *client) GetID() string                    { return c.cfg.ID }
func (c *client) RedirectURIs() []string           { return nil }
func (c *client) RedirectURIGlobs() []string       { return c.cfg.RedirectGlobs }
func (c *client) PostLogoutRedirectURIs() []string { return nil }
func (c *client) PostLogoutRedirectURIGlobs() []string {
	return c.cfg.PostLogoutRedirect
}
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod {
	if c.cfg.Secret == "" {
		return oidc.AuthMethodNone
	}
	return oidc.AuthMethodBasic
}
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken}
}
func (c *client) LoginURL(id string) string            { return "/login/username?authRequestID=" + id }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration       { return c.idToken }
func (c *client) DevMode() bool                        { return true } // http loopback redirects
func (c *client) IsScopeAllowed(scope string) bool     { return false }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// --- keys --------------------------------------------------------------------------------------

type key struct {
	id        string
	algorithm jose.SignatureAlgorithm
	private   any
	public    any
}

func newKey(algorithm string) (*key, error) {
	id := uuid.NewString()
	switch algorithm {
	case "", "RS256":
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		return &key{id, jose.RS256, k, &k.PublicKey}, nil
	case "ES256":
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		return &key{id, jose.ES256, k, &k.PublicKey}, nil
	}
	return nil, fmt.Errorf("unsupported algorithm %q", algorithm)
}

type signingKey struct{ k *key }

func (s signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return s.k.algorithm }
func (s signingKey) Key() any                                    { return s.k.private }
func (s signingKey) ID() string                                  { return s.k.id }

type publicKey struct{ k *key }

func (p publicKey) ID() string                         { return p.k.id }
func (p publicKey) Algorithm() jose.SignatureAlgorithm { return p.k.algorithm }
func (p publicKey) Use() string                        { return "sig" }
func (p publicKey) Key() any                           { return p.k.public }

// --- the storage: the example's, with our clients, claims, lifetimes and keys ------------------

type store struct {
	*storage.Storage
	users   *users
	clients map[string]*client

	mu          sync.Mutex
	keys        []*key // the last one signs
	accessToken time.Duration
}

func (s *store) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	if c, ok := s.clients[id]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("client not found")
}

func (s *store) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	c, ok := s.clients[id]
	if !ok || c.cfg.Secret == "" || c.cfg.Secret != secret {
		return fmt.Errorf("invalid client")
	}
	return nil
}

func (s *store) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return signingKey{s.keys[len(s.keys)-1]}, nil
}

func (s *store) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256, jose.ES256}, nil
}

func (s *store) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]op.Key, 0, len(s.keys))
	for _, k := range s.keys {
		out = append(out, publicKey{k})
	}
	return out, nil
}

func (s *store) lifetime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accessToken
}

func (s *store) CreateAccessToken(ctx context.Context, request op.TokenRequest) (string, time.Time, error) {
	id, _, err := s.Storage.CreateAccessToken(ctx, request)
	return id, time.Now().Add(s.lifetime()), err
}

func (s *store) CreateAccessAndRefreshTokens(
	ctx context.Context, request op.TokenRequest, current string,
) (string, string, time.Time, error) {
	id, refresh, _, err := s.Storage.CreateAccessAndRefreshTokens(ctx, request, current)
	return id, refresh, time.Now().Add(s.lifetime()), err
}

func (s *store) extraClaims(userID string) map[string]any {
	return s.users.claims[userID]
}

func (s *store) GetPrivateClaimsFromScopes(ctx context.Context, userID, clientID string, scopes []string) (map[string]any, error) {
	claims := map[string]any{}
	for name, value := range s.extraClaims(userID) {
		claims[name] = value
	}
	if user := s.users.GetUserByID(userID); user != nil {
		claims["name"] = user.FirstName + " " + user.LastName
		claims["preferred_username"] = user.Username
	}
	return claims, nil
}

func (s *store) addClaims(info *oidc.UserInfo, userID string) {
	for name, value := range s.extraClaims(userID) {
		info.AppendClaims(name, value)
	}
}

func (s *store) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, token op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, token, scopes); err != nil {
		return err
	}
	s.addClaims(info, token.GetSubject())
	return nil
}

func (s *store) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, info, tokenID, subject, origin); err != nil {
		return err
	}
	s.addClaims(info, subject)
	return nil
}

// POST /test/rotate[?alg=ES256][&retire=1]: a new signing key; retire=1 drops the others from the JWKS.
func (s *store) rotate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	k, err := newKey(r.URL.Query().Get("alg"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if r.URL.Query().Get("retire") == "1" {
		s.keys = nil
	}
	s.keys = append(s.keys, k)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"kid": k.id, "alg": string(k.algorithm)})
}

// POST /test/access-token-lifetime?seconds=N: the lifetime of access tokens issued from now on.
func (s *store) setLifetime(w http.ResponseWriter, r *http.Request) {
	seconds, err := strconv.Atoi(r.URL.Query().Get("seconds"))
	if r.Method != http.MethodPost || err != nil || seconds <= 0 {
		http.Error(w, "POST ?seconds=N", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.accessToken = time.Duration(seconds) * time.Second
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func seconds(n, fallback int) time.Duration {
	if n <= 0 {
		n = fallback
	}
	return time.Duration(n) * time.Second
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: qf-oidc-provider CONFIG.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var cfg config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "config:", err)
		os.Exit(1)
	}
	first, err := newKey(cfg.Algorithm)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	u := newUsers(cfg.Users)
	s := &store{
		Storage:     storage.NewStorageWithClients(u, map[string]*storage.Client{}),
		users:       u,
		clients:     map[string]*client{},
		keys:        []*key{first},
		accessToken: seconds(cfg.AccessTokenSeconds, 300),
	}
	for _, c := range cfg.Clients {
		s.clients[c.ID] = &client{cfg: c, idToken: seconds(cfg.IDTokenSeconds, 300)}
	}

	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", cfg.Port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	issuer := fmt.Sprintf("http://127.0.0.1:%d", listener.Addr().(*net.TCPAddr).Port)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	router := exampleop.SetupServer(issuer, s, logger, false)
	mux := http.NewServeMux()
	mux.HandleFunc("/test/rotate", s.rotate)
	mux.HandleFunc("/test/access-token-lifetime", s.setLifetime)
	mux.Handle("/", router)
	fmt.Printf("listening %s\n", issuer)
	if err := http.Serve(listener, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
