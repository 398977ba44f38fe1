"""Following a whole job: the timeline, change detection, later probe windows and the black box
(`torchdoctor run --follow`, `watch(follow=True)`)."""
