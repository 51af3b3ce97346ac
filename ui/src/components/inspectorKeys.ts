// Which step inspector the arrow keys move when none has the focus: the one opened or used last
// among those in the view on screen (several can be open: one per chat answer or compared run).

import { inVisibleView } from './visible';

const order: HTMLElement[] = [];

/** Makes `el` the inspector the arrow keys move. */
export function activate(el: HTMLElement) {
  release(el);
  order.push(el);
}

export function release(el: HTMLElement) {
  const at = order.indexOf(el);
  if (at >= 0) order.splice(at, 1);
}

/** Whether `el` is the inspector that keys pressed outside any inspector should move. */
export function isCurrent(el: HTMLElement): boolean {
  for (let i = order.length - 1; i >= 0; i--) {
    if (inVisibleView(order[i])) return order[i] === el;
  }
  return false;
}

/** Whether a key press goes to a control that uses the arrow keys itself (text, menus, sliders, tabs). */
export function ownsArrows(target: EventTarget | null): boolean {
  if (!(target instanceof Element)) return false;
  return (
    target.closest(
      'input, textarea, select, [contenteditable]:not([contenteditable="false"]), [role="tab"], [role="slider"], [role="listbox"], [role="menu"], [role="grid"]',
    ) !== null
  );
}
