// A throw-away OpenID provider for kasi's end-to-end tests: the npm
// package oidc-provider (an OpenID Certified implementation) with its
// development login pages (any login; the password is not checked), one
// client for kasi's console, and JWT access tokens for the admin API whose
// `roles` claim comes from KASI_TEST_ROLES. Prints `listening <issuer>`
// once its port is bound, then reads the console's callback URL (the one
// redirect URI its client allows) as the first line of its standard input
// — the hub, which needs the issuer to start, tells its port only then —
// and prints `ready`; until then it answers 503. Never for production:
// keys are made at start, and all state is in memory.
//
//   echo http://127.0.0.1:3001/console/oidc/callback |
//     KASI_TEST_ROLES='{"dora":["finance"]}' node provider.mjs
import { createServer } from 'node:http';
import { createInterface } from 'node:readline';
import { generateKeyPairSync } from 'node:crypto';
import Provider from 'oidc-provider';

const roles = JSON.parse(process.env.KASI_TEST_ROLES || '{}');
const secret = process.env.KASI_TEST_CLIENT_SECRET || 'kasi-test-secret';
// A resource indicator is an absolute URI (RFC 8707); it becomes the
// access token's audience, kasi's --oidc-audience.
const audience = 'urn:kasi:admin';

const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const signing = { ...privateKey.export({ format: 'jwk' }), kid: 'test-es256', alg: 'ES256', use: 'sig' };

let handler = (req, res) => { res.statusCode = 503; res.end(); };
const server = createServer((req, res) => handler(req, res));
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  console.log(`listening ${issuer}`);
  const lines = createInterface({ input: process.stdin });
  lines.once('line', (redirect) => serve(issuer, redirect.trim()));
});

function serve(issuer, redirect) {
  const provider = new Provider(issuer, {
    clients: [{
      client_id: 'kasi-console',
      client_secret: secret,
      redirect_uris: [redirect],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    }],
    jwks: { keys: [signing] },
    enabledJWA: { idTokenSigningAlgValues: ['ES256'] },
    clientDefaults: { id_token_signed_response_alg: 'ES256' },
    pkce: { required: () => true },
    scopes: ['openid', 'profile'],
    claims: { openid: ['sub'], profile: ['preferred_username'] },
    findAccount: async (ctx, id) => ({
      accountId: id,
      claims: async () => ({ sub: id, preferred_username: id }),
    }),
    features: {
      devInteractions: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: async () => audience,
        useGrantedResource: async () => true,
        getResourceServerInfo: async (ctx, indicator) => {
          if (indicator !== audience) throw new Error(`unknown resource ${indicator}`);
          return {
            scope: 'openid profile',
            audience,
            accessTokenTTL: 300,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'ES256' } },
          };
        },
      },
    },
    extraTokenClaims: async (ctx, token) => (
      token.kind === 'AccessToken'
        ? { roles: roles[token.accountId] || [], preferred_username: token.accountId }
        : undefined
    ),
  });
  provider.on('server_error', (ctx, error) => console.error('server_error', error));
  provider.on('grant.error', (ctx, error) => console.error('grant.error', error.message, error.error_description || ''));
  handler = provider.callback();
  console.log('ready');
}
