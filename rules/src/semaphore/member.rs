//! The members of a semaphore's permit set: a permit of the SEM.* commands
//! is `<owner>:<i>` (so a holder's permits are found by its owner); any
//! other member is a Redisson permit, its own random id.

/// The member of `owner`'s `index`th permit: `<owner>:<index>`.
pub fn permit_id(owner: &[u8], index: u32) -> Vec<u8> {
    let mut id = Vec::with_capacity(owner.len() + 8);
    id.extend_from_slice(owner);
    id.push(b':');
    id.extend_from_slice(index.to_string().as_bytes());
    id
}

/// The owner and index of a SEM.ACQUIRE permit; `None` for a member that
/// is not one (a Redisson permit id).
pub fn owner_of(id: &[u8]) -> Option<(&[u8], u32)> {
    let colon = id.iter().rposition(|&b| b == b':')?;
    let (owner, digits) = (&id[..colon], &id[colon + 1..]);
    if owner.is_empty() || digits.is_empty() || digits[0] == b'0' {
        return None;
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let index = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some((owner, index))
}
