//! The main window's first size: the configured one, shrunk to fit the screen it opens on, so that
//! it never opens partly off a small display.

use tauri::{LogicalSize, Monitor, WebviewWindow};

/// Share of the screen's width and height the window may take at most.
const SCREEN_SHARE: f64 = 0.9;

/// `wanted` shrunk to `SCREEN_SHARE` of `screen` where it is larger (both logical pixels).
pub fn fitted(wanted: LogicalSize<f64>, screen: LogicalSize<f64>) -> LogicalSize<f64> {
    LogicalSize::new(
        wanted.width.min(screen.width * SCREEN_SHARE),
        wanted.height.min(screen.height * SCREEN_SHARE),
    )
}

/// Shrinks and centres `window` on its monitor when the configured size does not fit it.
pub fn fit_to_screen(window: &WebviewWindow) -> tauri::Result<()> {
    let Some(monitor): Option<Monitor> = window.current_monitor()? else {
        return Ok(());
    };
    let scale = monitor.scale_factor();
    let screen = monitor.size().to_logical::<f64>(scale);
    let wanted = window.inner_size()?.to_logical::<f64>(scale);
    let size = fitted(wanted, screen);
    if size != wanted {
        window.set_size(size)?;
        window.center()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_larger_than_the_screen_takes_most_of_it() {
        let wanted = LogicalSize::new(1280.0, 860.0);
        assert_eq!(
            fitted(wanted, LogicalSize::new(800.0, 600.0)),
            LogicalSize::new(720.0, 540.0)
        );
        assert_eq!(fitted(wanted, LogicalSize::new(1920.0, 1080.0)), wanted);
        assert_eq!(
            fitted(wanted, LogicalSize::new(1366.0, 768.0)),
            LogicalSize::new(1229.4, 691.2)
        );
    }
}
