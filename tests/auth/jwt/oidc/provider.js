// A real OpenID provider (node-oidc-provider) on loopback for plantstore's JWT tests.
//
//   node provider.js PORT AUDIENCE
//
// Issues JWT access tokens (ES256, audience AUDIENCE) by the client-credentials grant to two
// clients, "gardener-app" and "other-app" (secret: "<client id>-secret"); a token's `sub` is
// its client id. Every start makes a fresh signing key with a fresh `kid`, so restarting on
// the same port is a key rotation. Prints "listening <issuer>" once it serves.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import Provider from 'oidc-provider';

const [port, audience] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;
const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'ES256', use: 'sig' };

const client = (clientId) => ({
  client_id: clientId,
  client_secret: `${clientId}-secret`,
  grant_types: ['client_credentials'],
  redirect_uris: [],
  response_types: [],
});

const provider = new Provider(issuer, {
  clients: [client('gardener-app'), client('other-app')],
  clientDefaults: { id_token_signed_response_alg: 'ES256' },
  jwks: { keys: [signingKey] },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => audience,
      useGrantedResource: () => true,
      getResourceServerInfo: () => ({
        scope: 'plants',
        audience,
        accessTokenFormat: 'jwt',
        accessTokenTTL: 600,
        jwt: { sign: { alg: 'ES256' } },
      }),
    },
  },
});

const server = provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`listening ${issuer} kid=${signingKey.kid}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
