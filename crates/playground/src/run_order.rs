//! The order in which the runners of a comparison or a bench take their turns on one prompt. A
//! plain rotation keeps each runner behind the same neighbour every time, so whatever one run
//! leaves behind for the next (warm caches, a cleared KV cache) favours the same runner all
//! along. A Williams design fixes that: over a full cycle of turns every runner holds every place
//! equally often and follows every other runner equally often.

/// The runners `0..runners` in the order of turn `turn`. A full cycle is `runners` turns for an
/// even count of runners and twice that for an odd one.
pub fn balanced_order(runners: usize, turn: usize) -> Vec<usize> {
    if runners == 0 {
        return Vec::new();
    }
    // The first turn: 0, 1, n-1, 2, n-2, ...; the others shift it, and for an odd count the
    // second half of the cycle reverses it.
    let first = (0..runners).map(|j| match j {
        0 => 0,
        j if j % 2 == 1 => j.div_ceil(2),
        j => runners - j / 2,
    });
    let cycle = if runners.is_multiple_of(2) {
        runners
    } else {
        2 * runners
    };
    let row = turn % cycle;
    let mut order: Vec<usize> = first.map(|w| (w + row) % runners).collect();
    if row >= runners {
        order.reverse();
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_runners_follow_each_other_once_per_cycle() {
        let orders: Vec<Vec<usize>> = (0..4).map(|t| balanced_order(4, t)).collect();
        assert_eq!(
            orders,
            vec![
                vec![0, 1, 3, 2],
                vec![1, 2, 0, 3],
                vec![2, 3, 1, 0],
                vec![3, 0, 2, 1]
            ]
        );
        assert_eq!(balanced_order(4, 5), balanced_order(4, 1));
    }

    #[test]
    fn every_place_and_every_predecessor_comes_equally_often() {
        for runners in 1usize..=7 {
            let cycle = if runners.is_multiple_of(2) {
                runners
            } else {
                2 * runners
            };
            let mut places = vec![vec![0; runners]; runners];
            let mut follows = vec![vec![0; runners]; runners];
            for turn in 0..cycle {
                let order = balanced_order(runners, turn);
                let mut sorted = order.clone();
                sorted.sort();
                assert_eq!(sorted, (0..runners).collect::<Vec<_>>(), "a permutation");
                for (place, &runner) in order.iter().enumerate() {
                    places[runner][place] += 1;
                }
                for pair in order.windows(2) {
                    follows[pair[0]][pair[1]] += 1;
                }
            }
            // Each place, and each runner after each other, once per `cycle / runners` turns.
            let per_place = cycle / runners;
            assert!(
                places.iter().flatten().all(|&n| n == per_place),
                "{runners}: {places:?}"
            );
            for (a, row) in follows.iter().enumerate() {
                for (b, &n) in row.iter().enumerate() {
                    let expected = if a == b { 0 } else { per_place };
                    assert_eq!(n, expected, "{runners} runners: {b} after {a}");
                }
            }
        }
    }
}
