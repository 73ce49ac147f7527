"""The main window: docks, menus, the playback bar and the export dialogs."""
