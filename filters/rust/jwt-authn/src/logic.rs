//! Pure logic of `jwt-authn`: no host calls (the caller passes the time), so
//! it runs in host-target tests.

use base64ct::{Base64UrlUnpadded, Encoding};
use p256::ecdsa::signature::Verifier;
use pkcs1::DecodeRsaPublicKey;
use pkcs8::DecodePublicKey;
use rsa::BoxedUint;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use wasmgate_filter::FilterConfig;
use wasmgate_filter::headers::{AsHeader, bearer_token};

type RsaVerifyingKey = rsa::pkcs1v15::VerifyingKey<rsa::sha2::Sha256>;

/// The filter's `config` table, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    issuer: String,
    #[serde(default)]
    audiences: Vec<String>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    keys: Vec<Map<String, Value>>,
    #[serde(default)]
    jwks: Option<Jwks>,
    #[serde(default = "default_username_claim")]
    username_claim: String,
    #[serde(default)]
    username_prefix: String,
    #[serde(default = "default_groups_claim")]
    groups_claim: String,
    #[serde(default)]
    groups_prefix: String,
    #[serde(default)]
    uid_claim: Option<String>,
    #[serde(default)]
    required_claims: BTreeMap<String, String>,
    #[serde(default = "default_leeway")]
    leeway_seconds: u32,
}

#[derive(Debug, Deserialize)]
struct Jwks {
    keys: Vec<Map<String, Value>>,
}

fn default_username_claim() -> String {
    "sub".into()
}

fn default_groups_claim() -> String {
    "groups".into()
}

fn default_leeway() -> u32 {
    60
}

/// A checked config with decoded keys.
#[derive(Deserialize)]
#[serde(try_from = "RawConfig")]
pub struct Config {
    pub issuer: String,
    pub audiences: Vec<String>,
    pub keys: Vec<Key>,
    pub username_claim: String,
    pub username_prefix: String,
    pub groups_claim: String,
    pub groups_prefix: String,
    pub uid_claim: Option<String>,
    pub required_claims: BTreeMap<String, String>,
    pub leeway_seconds: f64,
}

/// One verification key.
pub struct Key {
    pub kid: Option<String>,
    pub material: KeyMaterial,
}

pub enum KeyMaterial {
    /// An RSA key, for RS256.
    Rsa(RsaVerifyingKey),
    /// A P-256 key, for ES256.
    Ec(p256::ecdsa::VerifyingKey),
}

impl KeyMaterial {
    fn alg(&self) -> &'static str {
        match self {
            KeyMaterial::Rsa(_) => "RS256",
            KeyMaterial::Ec(_) => "ES256",
        }
    }
}

fn b64url(s: &str) -> Result<Vec<u8>, String> {
    Base64UrlUnpadded::decode_vec(s).map_err(|e| e.to_string())
}

fn str_field<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, String> {
    match obj.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{name:?} is not a string")),
    }
}

fn required_str<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    str_field(obj, name)?.ok_or_else(|| format!("{name:?} is missing"))
}

/// Decodes a PEM public key: `PUBLIC KEY` (SPKI, RSA or P-256) or
/// `RSA PUBLIC KEY` (PKCS#1).
fn pem_key(pem: &str) -> Result<KeyMaterial, String> {
    let pem = pem.trim();
    if pem.starts_with("-----BEGIN RSA PUBLIC KEY-----") {
        let key =
            rsa::PublicKey::from_pkcs1_pem(pem).map_err(|e| format!("bad RSA PUBLIC KEY: {e}"))?;
        return Ok(KeyMaterial::Rsa(RsaVerifyingKey::new(key)));
    }
    if !pem.starts_with("-----BEGIN PUBLIC KEY-----") {
        return Err("not a PEM \"PUBLIC KEY\" or \"RSA PUBLIC KEY\" block".into());
    }
    if let Ok(key) = rsa::PublicKey::from_public_key_pem(pem) {
        return Ok(KeyMaterial::Rsa(RsaVerifyingKey::new(key)));
    }
    p256::ecdsa::VerifyingKey::from_public_key_pem(pem)
        .map(KeyMaterial::Ec)
        .map_err(|e| format!("not an RSA or P-256 public key: {e}"))
}

/// Decodes a JWK (RFC 7517/7518): `kty` `RSA` with `n`, `e`, or `EC` with
/// `crv` `P-256`, `x`, `y`.
fn jwk_key(jwk: &Map<String, Value>) -> Result<KeyMaterial, String> {
    if let Some(usage) = str_field(jwk, "use")?
        && usage != "sig"
    {
        return Err(format!("\"use\" is {usage:?}, not \"sig\""));
    }
    let material = match required_str(jwk, "kty")? {
        "RSA" => {
            let n = b64url(required_str(jwk, "n")?).map_err(|e| format!("bad \"n\": {e}"))?;
            let e = b64url(required_str(jwk, "e")?).map_err(|e| format!("bad \"e\": {e}"))?;
            let key = rsa::PublicKey::new(
                BoxedUint::from_be_slice_vartime(&n),
                BoxedUint::from_be_slice_vartime(&e),
            )
            .map_err(|e| format!("bad RSA key: {e}"))?;
            KeyMaterial::Rsa(RsaVerifyingKey::new(key))
        }
        "EC" => {
            let crv = required_str(jwk, "crv")?;
            if crv != "P-256" {
                return Err(format!("curve {crv:?} is not supported (only P-256)"));
            }
            let x = b64url(required_str(jwk, "x")?).map_err(|e| format!("bad \"x\": {e}"))?;
            let y = b64url(required_str(jwk, "y")?).map_err(|e| format!("bad \"y\": {e}"))?;
            if x.len() != 32 || y.len() != 32 {
                return Err("\"x\" and \"y\" must be 32 bytes each".into());
            }
            let mut point = Vec::with_capacity(65);
            point.push(0x04);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            KeyMaterial::Ec(
                p256::ecdsa::VerifyingKey::from_sec1_bytes(&point)
                    .map_err(|_| "the point is not on P-256".to_string())?,
            )
        }
        other => return Err(format!("key type {other:?} is not supported (RSA or EC)")),
    };
    Ok(material)
}

/// One `keys` entry: `{"pem": "...", "kid": "..."}` or a JWK.
fn config_key(entry: &Map<String, Value>) -> Result<Key, String> {
    let kid = str_field(entry, "kid")?.map(String::from);
    let material = match str_field(entry, "pem")? {
        Some(pem) => {
            if let Some(extra) = entry
                .keys()
                .find(|k| !matches!(k.as_str(), "pem" | "kid" | "alg"))
            {
                return Err(format!("unknown field {extra:?} beside \"pem\""));
            }
            pem_key(pem)?
        }
        None => jwk_key(entry)?,
    };
    if let Some(alg) = str_field(entry, "alg")?
        && alg != material.alg()
    {
        return Err(format!(
            "\"alg\" {alg:?} does not fit the key (it is a {} key)",
            material.alg()
        ));
    }
    Ok(Key { kid, material })
}

impl FilterConfig for Config {
    const FILTER: &'static str = "jwt-authn";
}

impl TryFrom<RawConfig> for Config {
    type Error = String;

    fn try_from(raw: RawConfig) -> Result<Config, String> {
        if raw.issuer.is_empty() {
            return Err("issuer is empty".into());
        }
        let mut audiences = raw.audiences;
        audiences.extend(raw.client_id);
        if audiences.is_empty() || audiences.iter().any(String::is_empty) {
            return Err(
                "give the accepted audiences in audiences (or client_id), none empty".into(),
            );
        }
        let entries = raw.keys.iter().map(|k| ("keys", k));
        let jwks = raw
            .jwks
            .iter()
            .flat_map(|j| j.keys.iter())
            .map(|k| ("jwks.keys", k));
        let keys = entries
            .chain(jwks)
            .enumerate()
            .map(|(i, (list, k))| config_key(k).map_err(|e| format!("{list} entry {i}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err("no keys: give keys (PEM or JWK entries) or jwks".into());
        }
        if raw.username_claim.is_empty() || raw.groups_claim.is_empty() {
            return Err("username_claim and groups_claim must not be empty".into());
        }
        Ok(Config {
            issuer: raw.issuer,
            audiences,
            keys,
            username_claim: raw.username_claim,
            username_prefix: raw.username_prefix,
            groups_claim: raw.groups_claim,
            groups_prefix: raw.groups_prefix,
            uid_claim: raw.uid_claim.filter(|c| !c.is_empty()),
            required_claims: raw.required_claims,
            leeway_seconds: f64::from(raw.leeway_seconds),
        })
    }
}

#[derive(Debug, PartialEq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// When the token stops being accepted (its `exp` plus the leeway), in
    /// seconds since 1970: no cache may keep the answer longer.
    pub accepted_until: f64,
}

#[derive(Debug, PartialEq)]
pub enum Outcome {
    Authenticated(User),
    NoOpinion(String),
    Error(String),
}

/// A JWS compact serialization split and decoded, not yet verified.
struct Jwt {
    header: Map<String, Value>,
    claims: Map<String, Value>,
    signing_input: String,
    signature: Vec<u8>,
}

fn json_object(part: &str) -> Option<Map<String, Value>> {
    match serde_json::from_slice(&b64url(part).ok()?).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// Splits and decodes a token; None when it is not a JWT at all.
fn decode(token: &str) -> Option<Jwt> {
    let mut parts = token.split('.');
    let (header, payload, signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let header = json_object(header).filter(|h| h.get("alg").is_some_and(Value::is_string))?;
    let claims = json_object(payload)?;
    // The JWS signing input: `header.payload`, as sent.
    let signing_input = token[..token.rfind('.')?].to_string();
    Some(Jwt {
        header,
        claims,
        signing_input,
        signature: b64url(signature).ok()?,
    })
}

fn verify_signature(config: &Config, jwt: &Jwt) -> Result<(), String> {
    let alg = jwt.header.get("alg").and_then(Value::as_str).unwrap_or("");
    if alg != "RS256" && alg != "ES256" {
        return Err(format!(
            "unsupported signing algorithm {alg:?} (RS256 or ES256)"
        ));
    }
    if jwt.header.contains_key("crit") {
        return Err(
            "the token has critical header extensions (\"crit\"), which are not supported".into(),
        );
    }
    let kid = jwt.header.get("kid").and_then(Value::as_str);
    let candidates: Vec<&Key> = config
        .keys
        .iter()
        .filter(|k| k.material.alg() == alg)
        .filter(|k| match (kid, &k.kid) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        })
        .collect();
    if candidates.is_empty() {
        return Err(match kid {
            Some(kid) => format!("no {alg} key with kid {kid:?}"),
            None => format!("no {alg} key"),
        });
    }
    let msg = jwt.signing_input.as_bytes();
    let verified = candidates.iter().any(|key| match &key.material {
        KeyMaterial::Rsa(vk) => rsa::pkcs1v15::Signature::try_from(jwt.signature.as_slice())
            .is_ok_and(|sig| vk.verify(msg, &sig).is_ok()),
        KeyMaterial::Ec(vk) => p256::ecdsa::Signature::from_slice(&jwt.signature)
            .is_ok_and(|sig| vk.verify(msg, &sig).is_ok()),
    });
    if verified {
        Ok(())
    } else {
        Err("invalid signature".into())
    }
}

fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<Option<f64>, String> {
    match claims.get(name) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("claim {name:?} is not a number")),
    }
}

fn check_claims(config: &Config, claims: &Map<String, Value>, now: f64) -> Result<User, String> {
    let exp = numeric_date(claims, "exp")?.ok_or("the token has no \"exp\" claim")?;
    if now > exp + config.leeway_seconds {
        return Err(format!("the token expired at {exp} (now {now:.0})"));
    }
    if let Some(nbf) = numeric_date(claims, "nbf")?
        && now + config.leeway_seconds < nbf
    {
        return Err(format!(
            "the token is not valid before {nbf} (now {now:.0})"
        ));
    }
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(Value::String(aud)) => vec![aud.as_str()],
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
        _ => return Err("the token has no \"aud\" claim".into()),
    };
    if !audiences
        .iter()
        .any(|a| config.audiences.iter().any(|c| c == a))
    {
        return Err(format!(
            "audience {audiences:?} is not among {:?}",
            config.audiences
        ));
    }
    for (claim, want) in &config.required_claims {
        if claims.get(claim).and_then(Value::as_str) != Some(want.as_str()) {
            return Err(format!("required claim {claim:?} is not {want:?}"));
        }
    }
    let username = match claims.get(&config.username_claim) {
        Some(Value::String(s)) if !s.is_empty() => s,
        Some(_) => {
            return Err(format!(
                "claim {:?} is not a non-empty string",
                config.username_claim
            ));
        }
        None => {
            return Err(format!(
                "the token has no {:?} claim",
                config.username_claim
            ));
        }
    };
    if config.username_claim == "email" {
        // Kubernetes: an email is only a user name when it is verified.
        match claims.get("email_verified") {
            None | Some(Value::Bool(true)) => {}
            Some(_) => return Err(format!("email {username:?} is not verified")),
        }
    }
    let groups = match claims.get(&config.groups_claim) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(g)) => vec![g.clone()],
        Some(Value::Array(list)) => list
            .iter()
            .map(|g| g.as_str().map(String::from))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                format!(
                    "claim {:?} is not a string or a list of strings",
                    config.groups_claim
                )
            })?,
        Some(_) => {
            return Err(format!(
                "claim {:?} is not a string or a list of strings",
                config.groups_claim
            ));
        }
    };
    let uid = match &config.uid_claim {
        None => String::new(),
        Some(claim) => match claims.get(claim) {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(format!("claim {claim:?} is not a string")),
        },
    };
    Ok(User {
        accepted_until: exp + config.leeway_seconds,
        name: format!("{}{}", config.username_prefix, username),
        uid,
        groups: groups
            .into_iter()
            .map(|g| format!("{}{g}", config.groups_prefix))
            .collect(),
    })
}

/// Authenticates one request: no bearer token, a token that is not a JWT or
/// a JWT from another issuer => no opinion; a JWT from our issuer that fails
/// any check => error, as Kubernetes' OIDC authenticator.
pub fn authenticate<H: AsHeader>(config: &Config, headers: &[H], now: f64) -> Outcome {
    let Some(token) = bearer_token(headers) else {
        return Outcome::NoOpinion("no bearer token in the Authorization header".into());
    };
    let Some(jwt) = decode(token) else {
        return Outcome::NoOpinion("the bearer token is not a JWT".into());
    };
    match jwt.claims.get("iss").and_then(Value::as_str) {
        Some(iss) if iss == config.issuer => {}
        Some(iss) => {
            return Outcome::NoOpinion(format!(
                "the JWT's issuer {iss:?} is not {:?}",
                config.issuer
            ));
        }
        None => return Outcome::NoOpinion("the JWT has no issuer".into()),
    }
    if let Err(e) = verify_signature(config, &jwt) {
        return Outcome::Error(format!("jwt-authn: {e}"));
    }
    match check_claims(config, &jwt.claims, now) {
        Ok(user) => Outcome::Authenticated(user),
        Err(e) => Outcome::Error(format!("jwt-authn: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::{SignatureEncoding, Signer};
    use pkcs1::EncodeRsaPublicKey;
    use pkcs8::{EncodePublicKey, LineEnding};
    use rsa::Generate;
    use serde_json::json;
    use std::sync::OnceLock;

    const NOW: f64 = 1_800_000_000.0;
    const ISSUER: &str = "https://issuer.example.com";

    struct Keys {
        rsa: rsa::pkcs1v15::SigningKey<rsa::sha2::Sha256>,
        rsa_public: rsa::PublicKey,
        ec: p256::ecdsa::SigningKey,
        other_ec: p256::ecdsa::SigningKey,
    }

    /// Throw-away keys, generated once per test run.
    fn keys() -> &'static Keys {
        static KEYS: OnceLock<Keys> = OnceLock::new();
        KEYS.get_or_init(|| {
            let private = rsa::PrivateKey::generate();
            let rsa_public = private.to_public_key();
            Keys {
                rsa: rsa::pkcs1v15::SigningKey::new(private),
                rsa_public,
                ec: p256::ecdsa::SigningKey::generate(),
                other_ec: p256::ecdsa::SigningKey::generate(),
            }
        })
    }

    fn enc(v: &Value) -> String {
        Base64UrlUnpadded::encode_string(v.to_string().as_bytes())
    }

    fn sign(header: Value, claims: Value) -> String {
        let input = format!("{}.{}", enc(&header), enc(&claims));
        let sig: Vec<u8> = match header["alg"].as_str() {
            Some("RS256") => keys().rsa.sign(input.as_bytes()).to_vec(),
            Some("ES256") => {
                let sig: p256::ecdsa::Signature = keys().ec.sign(input.as_bytes());
                sig.to_vec()
            }
            _ => b"junk".to_vec(),
        };
        format!("{input}.{}", Base64UrlUnpadded::encode_string(&sig))
    }

    fn claims() -> Value {
        json!({
            "iss": ISSUER, "aud": "wasmgate", "sub": "alice", "exp": NOW + 300.0, "nbf": NOW - 10.0,
            "iat": NOW - 10.0, "groups": ["dev", "ops"], "email": "alice@example.com", "email_verified": true
        })
    }

    fn rsa_pem() -> String {
        keys().rsa_public.to_public_key_pem(LineEnding::LF).unwrap()
    }

    fn ec_jwk(kid: &str) -> Value {
        let point = keys().ec.verifying_key().to_sec1_point(false);
        let bytes = point.as_bytes();
        json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
               "x": Base64UrlUnpadded::encode_string(&bytes[1..33]),
               "y": Base64UrlUnpadded::encode_string(&bytes[33..65])})
    }

    fn rsa_jwk(kid: &str) -> Value {
        use rsa::traits::PublicKeyParts;
        let k = &keys().rsa_public;
        json!({"kty": "RSA", "kid": kid, "alg": "RS256",
               "n": Base64UrlUnpadded::encode_string(&k.n().to_be_bytes_trimmed_vartime()),
               "e": Base64UrlUnpadded::encode_string(&k.e().to_be_bytes_trimmed_vartime())})
    }

    fn config(extra: Value) -> Config {
        let mut c = json!({"issuer": ISSUER, "audiences": ["wasmgate"], "keys": [{"pem": rsa_pem()}, ec_jwk("ec1")]});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        Config::parse(&c.to_string()).unwrap()
    }

    /// The outcome, `accepted_until` left out (`token_expiry_bounds_acceptance` checks it).
    fn run(config: &Config, token: &str) -> Outcome {
        match run_with_expiry(config, token) {
            Outcome::Authenticated(user) => Outcome::Authenticated(User {
                accepted_until: 0.0,
                ..user
            }),
            other => other,
        }
    }

    fn run_with_expiry(config: &Config, token: &str) -> Outcome {
        let header = format!("Bearer {token}");
        authenticate(config, &[("authorization", &header)], NOW)
    }

    fn alice(groups: &[&str]) -> Outcome {
        Outcome::Authenticated(User {
            name: "alice".into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            accepted_until: 0.0,
        })
    }

    #[test]
    fn token_expiry_bounds_acceptance() {
        let c = config(json!({}));
        let token = sign(json!({"alg": "RS256"}), claims());
        let Outcome::Authenticated(user) = run_with_expiry(&c, &token) else {
            panic!("the token is valid");
        };
        assert_eq!(user.accepted_until, NOW + 300.0 + c.leeway_seconds);
    }

    fn is_error(o: &Outcome, needle: &str) -> bool {
        matches!(o, Outcome::Error(m) if m.contains(needle))
    }

    #[test]
    fn valid_tokens() {
        let c = config(json!({}));
        let rs = sign(json!({"alg": "RS256", "typ": "JWT"}), claims());
        assert_eq!(run(&c, &rs), alice(&["dev", "ops"]));
        let es = sign(json!({"alg": "ES256", "kid": "ec1"}), claims());
        assert_eq!(run(&c, &es), alice(&["dev", "ops"]));
        // A kid the PEM key (which has none) may match.
        let rs_kid = sign(json!({"alg": "RS256", "kid": "whatever"}), claims());
        assert_eq!(run(&c, &rs_kid), alice(&["dev", "ops"]));
        // aud as a list, groups as a string.
        let mut cl = claims();
        cl["aud"] = json!(["other", "wasmgate"]);
        cl["groups"] = json!("solo");
        assert_eq!(
            run(&c, &sign(json!({"alg": "ES256"}), cl)),
            alice(&["solo"])
        );
        // No groups claim, no nbf; within the leeway after exp.
        let mut cl = claims();
        cl.as_object_mut().unwrap().remove("groups");
        cl.as_object_mut().unwrap().remove("nbf");
        cl["exp"] = json!(NOW - 30.0);
        assert_eq!(run(&c, &sign(json!({"alg": "RS256"}), cl)), alice(&[]));
    }

    #[test]
    fn claim_mapping() {
        let c = config(json!({
            "username_claim": "email", "username_prefix": "oidc:", "groups_claim": "roles",
            "groups_prefix": "oidc:", "uid_claim": "sub", "client_id": "second",
            "audiences": [], "required_claims": {"tenant": "blue"}
        }));
        let mut cl = claims();
        cl["aud"] = json!("second");
        cl["roles"] = json!(["admin"]);
        cl["tenant"] = json!("blue");
        assert_eq!(
            run(&c, &sign(json!({"alg": "RS256"}), cl.clone())),
            Outcome::Authenticated(User {
                name: "oidc:alice@example.com".into(),
                uid: "alice".into(),
                groups: vec!["oidc:admin".into()],
                accepted_until: 0.0,
            })
        );
        let mut unverified = cl.clone();
        unverified["email_verified"] = json!(false);
        assert!(is_error(
            &run(&c, &sign(json!({"alg": "RS256"}), unverified)),
            "not verified"
        ));
        let mut wrong_tenant = cl.clone();
        wrong_tenant["tenant"] = json!("red");
        assert!(is_error(
            &run(&c, &sign(json!({"alg": "RS256"}), wrong_tenant)),
            "required claim"
        ));
        let mut bad_groups = cl;
        bad_groups["roles"] = json!([1]);
        assert!(is_error(
            &run(&c, &sign(json!({"alg": "RS256"}), bad_groups)),
            "roles"
        ));
    }

    #[test]
    fn no_opinion() {
        let c = config(json!({}));
        let mut other_issuer = claims();
        other_issuer["iss"] = json!("https://elsewhere");
        let mut no_issuer = claims();
        no_issuer.as_object_mut().unwrap().remove("iss");
        let cases = [
            None,
            Some("Basic abc".to_string()),
            Some("Bearer opaque-token".into()),
            Some("Bearer a.b.c".into()),
            Some("Bearer a.b.c.d".into()),
            Some(format!(
                "Bearer {}.{}.sig",
                enc(&json!({"typ": "JWT"})),
                enc(&claims())
            )),
            Some(format!(
                "Bearer {}.{}.sig",
                enc(&json!({"alg": "RS256"})),
                enc(&json!([1]))
            )),
            // Another issuer's token, even badly signed: not ours to judge.
            Some(format!(
                "Bearer {}",
                sign(json!({"alg": "RS256"}), other_issuer)
            )),
            Some(format!(
                "Bearer {}",
                sign(json!({"alg": "HS256"}), no_issuer)
            )),
        ];
        for header in cases {
            let headers: Vec<(&str, &str)> = header
                .iter()
                .map(|h| ("authorization", h.as_str()))
                .collect();
            let got = authenticate(&c, &headers, NOW);
            assert!(matches!(got, Outcome::NoOpinion(_)), "{header:?}: {got:?}");
        }
    }

    #[test]
    fn errors_for_our_issuer() {
        let c = config(json!({}));
        let rows: Vec<(String, &str)> = vec![
            (
                sign(json!({"alg": "HS256"}), claims()),
                "unsupported signing algorithm",
            ),
            (
                sign(json!({"alg": "none"}), claims()),
                "unsupported signing algorithm",
            ),
            (
                sign(json!({"alg": "ES256", "kid": "nope"}), claims()),
                "no ES256 key with kid",
            ),
            (
                sign(json!({"alg": "RS256", "crit": ["exp"]}), claims()),
                "crit",
            ),
            (
                {
                    let mut cl = claims();
                    cl["exp"] = json!(NOW - 61.0);
                    sign(json!({"alg": "RS256"}), cl)
                },
                "expired",
            ),
            (
                {
                    let mut cl = claims();
                    cl.as_object_mut().unwrap().remove("exp");
                    sign(json!({"alg": "RS256"}), cl)
                },
                "no \"exp\"",
            ),
            (
                {
                    let mut cl = claims();
                    cl["exp"] = json!("soon");
                    sign(json!({"alg": "RS256"}), cl)
                },
                "not a number",
            ),
            (
                {
                    let mut cl = claims();
                    cl["nbf"] = json!(NOW + 61.0);
                    sign(json!({"alg": "RS256"}), cl)
                },
                "not valid before",
            ),
            (
                {
                    let mut cl = claims();
                    cl["aud"] = json!("other");
                    sign(json!({"alg": "RS256"}), cl)
                },
                "audience",
            ),
            (
                {
                    let mut cl = claims();
                    cl["aud"] = json!(["a", "b"]);
                    sign(json!({"alg": "RS256"}), cl)
                },
                "audience",
            ),
            (
                {
                    let mut cl = claims();
                    cl.as_object_mut().unwrap().remove("aud");
                    sign(json!({"alg": "RS256"}), cl)
                },
                "no \"aud\"",
            ),
            (
                {
                    let mut cl = claims();
                    cl.as_object_mut().unwrap().remove("sub");
                    sign(json!({"alg": "RS256"}), cl)
                },
                "no \"sub\"",
            ),
            (
                {
                    let mut cl = claims();
                    cl["sub"] = json!(7);
                    sign(json!({"alg": "RS256"}), cl)
                },
                "not a non-empty string",
            ),
        ];
        for (token, needle) in rows {
            let got = run(&c, &token);
            assert!(is_error(&got, needle), "{needle}: {got:?}");
        }
    }

    #[test]
    fn tampered_and_foreign_signatures() {
        let c = config(json!({}));
        let token = sign(json!({"alg": "RS256"}), claims());
        // Change the payload, keep the signature.
        let (input, sig) = token.rsplit_once('.').unwrap();
        let (header, _) = input.split_once('.').unwrap();
        let mut cl = claims();
        cl["sub"] = json!("mallory");
        let forged = format!("{header}.{}.{sig}", enc(&cl));
        assert!(is_error(&run(&c, &forged), "invalid signature"));
        // An ES256 signature by a key we do not know.
        let input = format!("{}.{}", enc(&json!({"alg": "ES256"})), enc(&claims()));
        let sig: p256::ecdsa::Signature = keys().other_ec.sign(input.as_bytes());
        let foreign = format!(
            "{input}.{}",
            Base64UrlUnpadded::encode_string(&sig.to_vec())
        );
        assert!(is_error(&run(&c, &foreign), "invalid signature"));
        // An RS256 header over an ES256 signature.
        let es = sign(json!({"alg": "ES256"}), claims());
        let (_, es_sig) = es.rsplit_once('.').unwrap();
        let mixed = format!(
            "{}.{}.{es_sig}",
            enc(&json!({"alg": "RS256"})),
            enc(&claims())
        );
        assert!(is_error(&run(&c, &mixed), "invalid signature"));
    }

    #[test]
    fn key_formats() {
        let pkcs1 = keys().rsa_public.to_pkcs1_pem(LineEnding::LF).unwrap();
        let ec_pem = keys()
            .ec
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        let rs = sign(json!({"alg": "RS256", "kid": "r1"}), claims());
        let es = sign(json!({"alg": "ES256"}), claims());
        for keys in [
            json!({"keys": [{"pem": pkcs1}]}),
            json!({"keys": [{"pem": ec_pem, "kid": "e"}, rsa_jwk("r1")]}),
            json!({"jwks": {"keys": [rsa_jwk("r1"), ec_jwk("e")]}}),
        ] {
            let mut c = json!({"issuer": ISSUER, "client_id": "wasmgate"});
            for (k, v) in keys.as_object().unwrap() {
                c[k] = v.clone();
            }
            let c = Config::parse(&c.to_string()).unwrap();
            assert_eq!(run(&c, &rs), alice(&["dev", "ops"]), "{keys}");
            if c.keys
                .iter()
                .any(|k| matches!(k.material, KeyMaterial::Ec(_)))
            {
                assert_eq!(run(&c, &es), alice(&["dev", "ops"]), "{keys}");
            } else {
                assert!(is_error(&run(&c, &es), "no ES256 key"));
            }
        }
        // A kid that names another key is not tried.
        let c = Config::parse(
            &json!({"issuer": ISSUER, "client_id": "wasmgate", "keys": [rsa_jwk("r2")]})
                .to_string(),
        )
        .unwrap();
        assert!(is_error(&run(&c, &rs), "no RS256 key with kid \"r1\""));
    }

    #[test]
    fn bad_configs() {
        let pem = rsa_pem();
        for bad in [
            json!([]),
            json!({}),
            json!({"issuer": ISSUER, "keys": [{"pem": pem}]}),
            json!({"issuer": "", "audiences": ["a"], "keys": [{"pem": pem}]}),
            json!({"issuer": ISSUER, "audiences": ["a"]}),
            json!({"issuer": ISSUER, "audiences": ["a"], "keys": [{"pem": "junk"}]}),
            json!({"issuer": ISSUER, "audiences": ["a"], "keys": [{"pem": pem, "alg": "ES256"}]}),
            json!({"issuer": ISSUER, "audiences": ["a"], "keys": [{"pem": pem, "x": 1}]}),
            json!({"issuer": ISSUER, "audiences": ["a"], "keys": [{"kty": "oct", "k": "abc"}]}),
            json!({"issuer": ISSUER, "audiences": ["a"], "keys": [{"kty": "EC", "crv": "P-384", "x": "", "y": ""}]}),
            json!({"issuer": ISSUER, "audiences": ["a"], "keys": [{"kty": "RSA", "n": "AQAB", "e": "AQAB"}]}),
            json!({"issuer": ISSUER, "audiences": ["a"], "keys": [{"kty": "EC", "crv": "P-256", "x": "AAAA", "y": "AAAA"}]}),
            json!({"issuer": ISSUER, "audiences": ["a"], "keys": [{"pem": pem}], "username_claim": ""}),
            json!({"issuer": ISSUER, "audiences": ["a"], "keys": [{"pem": pem}], "leeway_seconds": -1}),
            json!({"issuer": ISSUER, "audiences": ["a"], "keys": [{"pem": pem}], "usernameClaim": "email"}),
        ] {
            let err = Config::parse(&bad.to_string()).err().unwrap_or_default();
            assert!(err.starts_with("jwt-authn: bad config: "), "{bad}: {err}");
        }
        let mut jwk = ec_jwk("e");
        jwk["use"] = json!("enc");
        let err = Config::parse(
            &json!({"issuer": ISSUER, "audiences": ["a"], "keys": [jwk]}).to_string(),
        )
        .err()
        .unwrap_or_default();
        assert!(err.contains("\"use\""), "{err}");
    }
}
