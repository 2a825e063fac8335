//! How many seats a request takes (kube's work estimate,
//! `util/flowcontrol/request/list_work_estimator.go`): one, except a LIST,
//! which takes one seat per 100 objects it may return, from 1 to 10 (and no
//! more than its level allows, applied when it is admitted). kube
//! counts the objects in storage; a gateway cannot, so the `limit` of the
//! query alone estimates them, and a LIST without one takes one seat (kube's
//! answer when the count is unknown). A LIST that names its object
//! (`fieldSelector=metadata.name=...`, which request info turns into a name)
//! takes one seat whatever its limit, as kube's estimator answers it: storage
//! runs it as a GET.

use crate::request_info::RequestInfo;

/// kube's `minimumSeats` and `maximumSeats` (`MaximumListSeatsLimit`):
/// a level caps seats lower still, [`super::dispatch`]'s `max_seats`.
const MIN_SEATS: usize = 1;
pub(super) const MAX_SEATS: usize = 10;
/// kube's `objectsPerSeat`.
const OBJECTS_PER_SEAT: u64 = 100;

pub(crate) fn seats(info: &RequestInfo, query: Option<&str>) -> usize {
    if info.verb != "list" || !info.name.is_empty() {
        return MIN_SEATS;
    }
    let Some(limit) = query.and_then(limit) else {
        return MIN_SEATS;
    };
    let seats = limit.div_ceil(OBJECTS_PER_SEAT);
    usize::try_from(seats)
        .unwrap_or(MAX_SEATS)
        .clamp(MIN_SEATS, MAX_SEATS)
}

/// The positive `limit` of a query, if it has one.
fn limit(query: &str) -> Option<u64> {
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == "limit")
        .and_then(|(_, value)| value.parse::<u64>().ok())
        .filter(|limit| *limit > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(query: Option<&str>) -> usize {
        let info = RequestInfo::resolve(&http::Method::GET, "/api/v1/pods", query);
        seats(&info, query)
    }

    #[test]
    fn a_list_takes_a_seat_per_hundred_objects_of_its_limit() {
        assert_eq!(list(None), 1);
        assert_eq!(list(Some("limit=1")), 1);
        assert_eq!(list(Some("limit=100")), 1);
        assert_eq!(list(Some("limit=101")), 2);
        assert_eq!(list(Some("labelSelector=a%3Db&limit=500")), 5);
        assert_eq!(list(Some("limit=100000")), 10);
        assert_eq!(list(Some("limit=0")), 1);
        assert_eq!(list(Some("limit=lots")), 1);
        let get = RequestInfo::resolve(&http::Method::GET, "/api/v1/namespaces/a/pods/p", None);
        assert_eq!(seats(&get, Some("limit=900")), 1);
    }

    /// kube's `listWorkEstimator` (`util/flowcontrol/request/list_work_estimator.go`)
    /// answers a LIST with a name (its `fieldSelector` is `metadata.name=`,
    /// which request info turns into the name) with the minimum seat: the
    /// storage layer runs it as a GET, whatever its `limit`.
    #[test]
    fn a_list_of_one_named_object_takes_one_seat_whatever_its_limit() {
        let named = Some("fieldSelector=metadata.name%3Dp&limit=500");
        assert_eq!(list(named), 1);
        // A selector on another field still lists them all.
        assert_eq!(
            list(Some("fieldSelector=status.phase%3DRunning&limit=500")),
            5
        );
    }
}
