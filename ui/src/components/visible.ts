/** Whether `el` is in the view on screen (views stay mounted but hidden when another is open). */
export function inVisibleView(el: Element | undefined): boolean {
  return !!el && el.closest('[hidden]') === null;
}
