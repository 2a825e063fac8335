//! JWTs for the jwt-authn tests: throw-away RS256 and ES256 signing keys,
//! a filter config trusting them, claims and compact signed tokens.

use std::sync::OnceLock;

use base64ct::{Base64UrlUnpadded, Encoding};
use serde_json::{Value, json};

use super::unix_now;

pub const JWT_ISSUER: &str = "https://issuer.wasmgate.test";
pub const JWT_AUDIENCE: &str = "wasmgate";

struct JwtKeys {
    rsa: rsa::pkcs1v15::SigningKey<rsa::sha2::Sha256>,
    rsa_public_pem: String,
    ec: p256::ecdsa::SigningKey,
}

/// Throw-away signing keys, generated once per test binary.
fn jwt_keys() -> &'static JwtKeys {
    use rsa::Generate;
    use rsa::pkcs8::{EncodePublicKey, LineEnding};
    static KEYS: OnceLock<JwtKeys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let private = rsa::PrivateKey::generate();
        let rsa_public_pem = private
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .expect("a PEM public key");
        JwtKeys {
            rsa: rsa::pkcs1v15::SigningKey::new(private),
            rsa_public_pem,
            ec: p256::ecdsa::SigningKey::generate(),
        }
    })
}

/// A jwt-authn config trusting the RSA key (PEM) and the P-256 key (JWK).
pub fn jwt_config() -> Value {
    let keys = jwt_keys();
    let point = keys.ec.verifying_key().to_sec1_point(false);
    let bytes = point.as_bytes();
    json!({
        "issuer": JWT_ISSUER,
        "audiences": [JWT_AUDIENCE],
        "keys": [
            {"pem": keys.rsa_public_pem},
            {"kty": "EC", "crv": "P-256", "kid": "ec-1", "x": Base64UrlUnpadded::encode_string(&bytes[1..33]),
             "y": Base64UrlUnpadded::encode_string(&bytes[33..65])},
        ],
        "groups_claim": "groups",
    })
}

/// Claims for `sub`, valid for five minutes, for [`JWT_AUDIENCE`].
pub fn jwt_claims(sub: &str) -> Value {
    let now = unix_now();
    json!({"iss": JWT_ISSUER, "aud": JWT_AUDIENCE, "sub": sub, "iat": now - 10, "nbf": now - 10, "exp": now + 300, "groups": ["jwt-users"]})
}

/// A compact JWS of `claims`, signed with `alg` (`RS256` or `ES256`).
pub fn sign_jwt(alg: &str, claims: &Value) -> String {
    use rsa::signature::{SignatureEncoding, Signer};
    let keys = jwt_keys();
    let header = match alg {
        "ES256" => json!({"alg": "ES256", "typ": "JWT", "kid": "ec-1"}),
        _ => json!({"alg": alg, "typ": "JWT"}),
    };
    let encode = |value: &Value| Base64UrlUnpadded::encode_string(value.to_string().as_bytes());
    let input = format!("{}.{}", encode(&header), encode(claims));
    let signature: Vec<u8> = match alg {
        "RS256" => keys.rsa.sign(input.as_bytes()).to_vec(),
        "ES256" => {
            let signature: p256::ecdsa::Signature = keys.ec.sign(input.as_bytes());
            signature.to_vec()
        }
        other => panic!("no key for {other}"),
    };
    format!("{input}.{}", Base64UrlUnpadded::encode_string(&signature))
}
