// Copying text. The async Clipboard API needs a secure context (https or localhost): a server
// opened by its LAN address has none, so the older selection-based copy stands in there.

/** Copies `text`; false when the browser refused. */
export async function copyText(text: string): Promise<boolean> {
  // Undefined outside secure contexts, whatever the DOM types say.
  if (typeof navigator !== 'undefined' && navigator.clipboard) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Denied (e.g. permissions): try the fallback.
    }
  }
  if (typeof document === 'undefined') return false;
  const area = document.createElement('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.style.position = 'fixed';
  area.style.opacity = '0';
  document.body.append(area);
  area.select();
  try {
    return document.execCommand('copy');
  } catch {
    return false;
  } finally {
    area.remove();
  }
}
