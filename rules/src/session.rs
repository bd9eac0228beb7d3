//! Sessions: which connection names which session token (`LOCK.SESSION
//! token`), so that `SESSION token` binds KEEPALIVE holds to that connection
//! whichever connection sent the command; and the loss messages published on
//! a session's channel when the server ends or stops renewing a hold bound to
//! it that its owner did not release.
//!
//! A token is named by at most one connection and a connection names at most
//! one token: a connection naming a token another one names takes it over (a
//! client reconnecting before the server noticed its old connection died),
//! and naming a second token drops the first.

use crate::names::NameMap;

use crate::ids::IdMap;
use crate::keepalive::ClientId;

/// The channel the module publishes a session's loss messages on.
pub fn channel(token: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(CHANNEL_PREFIX.len() + token.len());
    out.extend_from_slice(CHANNEL_PREFIX);
    out.extend_from_slice(token);
    out
}

pub const CHANNEL_PREFIX: &[u8] = b"__lock__:session:";

/// Why a hold bound to a session ended, or will end, without its owner
/// releasing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// LOCK.FORCERELEASE removed the lock.
    Forced,
    /// A renewal found the owner no longer holds the lock: deleted,
    /// flushed, overwritten, unlocked outside LOCK.*, or its lease ran out.
    Gone,
    /// `lock.keepalive-max-hold-ms` passed: no more renewals.
    MaxHold,
    /// The key's slot is no longer served by this node.
    Moved,
    /// An election's leader: the connection keeping it was not heard from
    /// within its lease (stopped, cut off), so it is renewed no more.
    Idle,
}

impl LossReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Forced => "forced",
            Self::Gone => "gone",
            Self::MaxHold => "maxhold",
            Self::Moved => "moved",
            Self::Idle => "idle",
        }
    }
}

/// The message that says `owner`'s hold of `key` is lost:
/// `<reason> <owner length> <owner> <key>`, the length in bytes so that
/// owners and keys may hold any byte.
pub fn loss_message(reason: LossReason, owner: &[u8], key: &[u8]) -> Vec<u8> {
    let reason = reason.as_str();
    let len = owner.len().to_string();
    let mut out = Vec::with_capacity(reason.len() + len.len() + owner.len() + key.len() + 3);
    out.extend_from_slice(reason.as_bytes());
    out.push(b' ');
    out.extend_from_slice(len.as_bytes());
    out.push(b' ');
    out.extend_from_slice(owner);
    out.push(b' ');
    out.extend_from_slice(key);
    out
}

/// The message that says every binding of this server ended: it became a
/// replica.
pub const DEMOTED_MESSAGE: &[u8] = b"demoted";

/// Reads a [`loss_message`] back: (reason, owner, key). The client
/// libraries parse the same format; this is its reference.
pub fn parse_loss_message(message: &[u8]) -> Option<(&str, &[u8], &[u8])> {
    let space = message.iter().position(|&b| b == b' ')?;
    let reason = std::str::from_utf8(&message[..space]).ok()?;
    let rest = &message[space + 1..];
    let space = rest.iter().position(|&b| b == b' ')?;
    let len: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
    let rest = &rest[space + 1..];
    if rest.len() < len + 1 || rest[len] != b' ' {
        return None;
    }
    Some((reason, &rest[..len], &rest[len + 1..]))
}

/// Which connection names which token.
#[derive(Debug, Default)]
pub struct Sessions {
    /// Tokens are chosen by clients: their hash is keyed (std's default).
    by_token: NameMap<Vec<u8>, ClientId>,
    by_client: IdMap<ClientId, Vec<u8>>,
}

impl Sessions {
    /// The connection naming `token`, if any.
    pub fn client(&self, token: &[u8]) -> Option<ClientId> {
        self.by_token.get(token).copied()
    }

    /// The token `client` names, if any.
    pub fn token(&self, client: ClientId) -> Option<&[u8]> {
        self.by_client.get(&client).map(Vec::as_slice)
    }

    /// `client` names `token`: it takes the token over from whichever
    /// connection named it, and drops the token it named before. Returns
    /// the connection the token was taken from.
    pub fn name(&mut self, client: ClientId, token: &[u8]) -> Option<ClientId> {
        if let Some(old) = self.by_client.remove(&client) {
            self.by_token.remove(&old);
        }
        let previous = self.by_token.insert(token.to_vec(), client);
        if let Some(previous) = previous.filter(|p| *p != client) {
            self.by_client.remove(&previous);
        }
        self.by_client.insert(client, token.to_vec());
        previous.filter(|p| *p != client)
    }

    /// `client` is gone: its token with it.
    pub fn client_gone(&mut self, client: ClientId) {
        if let Some(token) = self.by_client.remove(&client) {
            self.by_token.remove(&token);
        }
    }

    /// Every token named now.
    pub fn tokens(&self) -> impl Iterator<Item = &[u8]> {
        self.by_token.keys().map(Vec::as_slice)
    }

    pub fn len(&self) -> usize {
        self.by_token.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_token.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_one_connection_and_a_connection_one_token() {
        let mut s = Sessions::default();
        assert_eq!(s.name(1, b"a"), None);
        assert_eq!(s.client(b"a"), Some(1));
        assert_eq!(s.token(1), Some(&b"a"[..]));
        // Naming it again from the same connection changes nothing.
        assert_eq!(s.name(1, b"a"), None);
        assert_eq!(s.len(), 1);
        // Another connection takes it over.
        assert_eq!(s.name(2, b"a"), Some(1));
        assert_eq!(s.client(b"a"), Some(2));
        assert_eq!(s.token(1), None);
        // A second token drops the first.
        assert_eq!(s.name(2, b"b"), None);
        assert_eq!(s.client(b"a"), None);
        assert_eq!(s.client(b"b"), Some(2));
        assert_eq!(s.len(), 1);
        // The token goes with its connection, and only with it.
        s.name(3, b"c");
        s.client_gone(1);
        assert_eq!(s.len(), 2);
        s.client_gone(2);
        assert_eq!(s.client(b"b"), None);
        assert_eq!(s.tokens().collect::<Vec<_>>(), vec![&b"c"[..]]);
        s.client_gone(3);
        assert!(s.is_empty() && s.by_client.is_empty());
    }

    #[test]
    fn loss_messages_carry_any_owner_and_key() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"s:1", b"invoice:7"),
            (b"o w n e r", b"k e y"),
            (b"", b""),
            (b"\x00\xff", b" "),
        ];
        for (owner, key) in cases {
            let m = loss_message(LossReason::Forced, owner, key);
            assert_eq!(parse_loss_message(&m), Some(("forced", *owner, *key)));
        }
        assert_eq!(
            loss_message(LossReason::MaxHold, b"a b", b"k"),
            b"maxhold 3 a b k".to_vec()
        );
        assert_eq!(parse_loss_message(b"gone 9 a k"), None);
        assert_eq!(parse_loss_message(b"demoted"), None);
        assert_eq!(channel(b"t1"), b"__lock__:session:t1".to_vec());
    }
}
