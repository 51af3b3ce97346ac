//! The main window's first size and place: the configured size, shrunk to fit the screen it
//! opens on and placed in its middle, so that it never opens partly off a small display. The
//! place is computed here rather than with the window manager's centring, which may read the
//! window's size before the new one took effect.

use tauri::{LogicalPosition, LogicalSize, WebviewWindow};

/// Share of the screen's width and height the window may take at most.
const SCREEN_SHARE: f64 = 0.9;

/// Where the window goes on a screen at `origin` of `screen` logical pixels: `wanted` shrunk to
/// `SCREEN_SHARE` of the screen where it is larger, in the screen's middle. `None` when it
/// already fits.
pub fn placement(
    wanted: LogicalSize<f64>,
    origin: LogicalPosition<f64>,
    screen: LogicalSize<f64>,
) -> Option<(LogicalSize<f64>, LogicalPosition<f64>)> {
    let size = LogicalSize::new(
        wanted.width.min(screen.width * SCREEN_SHARE).round(),
        wanted.height.min(screen.height * SCREEN_SHARE).round(),
    );
    if size == wanted {
        return None;
    }
    let position = LogicalPosition::new(
        (origin.x + (screen.width - size.width) / 2.0).round(),
        (origin.y + (screen.height - size.height) / 2.0).round(),
    );
    Some((size, position))
}

/// Shrinks `window` to its monitor and places it in the middle when the configured size does
/// not fit.
pub fn fit_to_screen(window: &WebviewWindow) -> tauri::Result<()> {
    let Some(monitor) = window.current_monitor()?.or(window.primary_monitor()?) else {
        return Ok(());
    };
    let scale = monitor.scale_factor();
    let screen = monitor.size().to_logical::<f64>(scale);
    let origin = monitor.position().to_logical::<f64>(scale);
    let wanted = window.inner_size()?.to_logical::<f64>(scale);
    if let Some((size, position)) = placement(wanted, origin, screen) {
        window.set_size(size)?;
        window.set_position(position)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_larger_than_the_screen_takes_most_of_it_in_the_middle() {
        let wanted = LogicalSize::new(1280.0, 860.0);
        let origin = LogicalPosition::new(0.0, 0.0);
        assert_eq!(
            placement(wanted, origin, LogicalSize::new(800.0, 600.0)),
            Some((
                LogicalSize::new(720.0, 540.0),
                LogicalPosition::new(40.0, 30.0)
            ))
        );
        assert_eq!(
            placement(wanted, origin, LogicalSize::new(1366.0, 768.0)),
            Some((
                LogicalSize::new(1229.0, 691.0),
                LogicalPosition::new(69.0, 39.0)
            ))
        );
        // A second screen to the right of the first.
        assert_eq!(
            placement(
                wanted,
                LogicalPosition::new(1920.0, 0.0),
                LogicalSize::new(1024.0, 768.0)
            ),
            Some((
                LogicalSize::new(922.0, 691.0),
                LogicalPosition::new(1971.0, 39.0)
            ))
        );
        assert_eq!(
            placement(wanted, origin, LogicalSize::new(1920.0, 1080.0)),
            None
        );
    }
}
