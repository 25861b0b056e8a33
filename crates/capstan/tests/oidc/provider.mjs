// A real OpenID Connect provider for the single sign-on tests: npm `oidc-provider` (installed by
// scripts/setup.sh under $CAPSTAN_CACHE/oidc), on loopback, with one client and two users.
//
//   node provider.mjs MODULE_DIR CLIENT_ID CLIENT_SECRET REDIRECT_URI
//
// Listens on a free loopback port and prints `listening http://127.0.0.1:PORT` when ready. Its own
// development login form accepts any password; the account id typed in becomes the subject, and the
// account `dev` is in the group `developers` (every other one in no group).
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [moduleDir, clientId, clientSecret, redirectUri] = process.argv.slice(2);
const { default: Provider } = await import(
  pathToFileURL(path.join(moduleDir, 'node_modules', 'oidc-provider', 'lib', 'index.js')).href
);

const server = (await import('node:http')).createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    redirect_uris: [redirectUri],
    grant_types: ['authorization_code'],
    response_types: ['code'],
  }],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['preferred_username'], groups: ['groups'] },
  scopes: ['openid', 'email', 'profile', 'groups'],
  // Claims of the requested scopes go into the ID token, as Dex, Keycloak and Okta do by default.
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: true } },
  async findAccount(_ctx, id) {
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          email: `${id}@example.test`,
          // Capstan takes the email as the user name only when the provider verified it.
          email_verified: true,
          preferred_username: id,
          groups: id === 'dev' ? ['developers'] : [],
        };
      },
    };
  },
});
provider.on('server_error', (_ctx, err) => console.error('server_error', err));
server.on('request', provider.callback());
console.log(`listening ${issuer}`);
