// A click on the option a single-choice dropdown already shows closes its menu, as a click on
// any other option does. Dash 4's dcc.Dropdown draws those options as radio inputs and closes
// the menu from their change event, which a click on the checked one never fires: the menu
// stayed open over the page (the trace dropdown's covers the tabs), and the next click meant for
// a tab landed on it (tests/dashboards/test_dropdowns.py, bench/NOTES-dashboard.md). Escape is
// what closes the menu from the keyboard (Radix's popover listens for it on the document).
document.addEventListener('click', function (e) {
    const option = e.target instanceof Element ? e.target.closest('.dash-dropdown-options [role="option"]') : null;
    if (option && option.getAttribute('aria-selected') === 'true' && option.querySelector('input[type="radio"]')) {
        document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape', code: 'Escape', bubbles: true}));
    }
}, true);
